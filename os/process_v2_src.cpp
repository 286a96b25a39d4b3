// The one translation unit that compiles Boost.Process v2's out-of-line code. baton_os defines
// BOOST_PROCESS_V2_SEPARATE_COMPILATION because header-only mode does not link in Boost 1.81:
// process_environment's function bodies are never included. Kept alone so it is compiled once
// and never rebuilt. POSIX only: os/windows/ drives Win32 directly (os/CMakeLists.txt).
#include <boost/process/v2/src.hpp>
