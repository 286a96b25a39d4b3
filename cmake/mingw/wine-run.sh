#!/usr/bin/env bash
# CMAKE_CROSSCOMPILING_EMULATOR for the mingw build: runs a Windows .exe under wine (Debian's
# `wine` runs wine64 when wine32 is absent). Run ctest through scripts/windows.sh: it picks the
# prefix (WINEPREFIX) and starts wineserver and wine's services detached first; otherwise the
# first test's wine starts them holding ctest's output pipe, and ctest never finishes.
export WINEDEBUG="${WINEDEBUG:--all}"
exec wine "$@"
