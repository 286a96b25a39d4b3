# Build-time helper (cmake -P): runs COMMAND ("|"-separated argv) and writes its stdout to OUT,
# compressed with `gzip -9n` when GZIP is set (Debian wants man pages and changelogs that way,
# -n so the archive holds no name or time and the build stays reproducible). INPUT instead of
# COMMAND compresses that file. A failing command fails the build rather than ship an empty file.
string(REPLACE "|" ";" command "${COMMAND}")
set(tmp "${OUT}.tmp")
if(INPUT)
  configure_file(${INPUT} ${tmp} COPYONLY)
else()
  execute_process(COMMAND ${command} OUTPUT_FILE ${tmp} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${command}: exit ${rc}")
  endif()
endif()
if(GZIP)
  execute_process(COMMAND gzip -9n -c ${tmp} OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
  file(REMOVE ${tmp})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gzip ${OUT}: exit ${rc}")
  endif()
else()
  file(RENAME ${tmp} ${OUT})
endif()
