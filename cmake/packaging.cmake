# Install rules and the Debian package (cpack -G DEB): the two executables, the systemd units, a
# default settings file kept as a conffile, the docs, and maintainer scripts that create the
# `baton` system user. Included once from the root CMakeLists.txt, after every target exists.
include(GNUInstallDirs)

# A placeholder lintian accepts (a real domain, not localhost) until the project has its list.
set(BATON_DEB_MAINTAINER "baton developers <baton-dev@lists.example.org>")

install(TARGETS baton baton-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/baton.service
        DESTINATION lib/systemd/system)
# The per-user unit (systemctl --user), for a user's own daemon without root.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/user/baton.service
        DESTINATION lib/systemd/user)
# Absolute: /etc whatever the prefix, which is where the unit's ExecStart looks.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/settings.json DESTINATION /etc/baton)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/supervisor/DAEMON.md
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/baton)
install(FILES ${PROJECT_SOURCE_DIR}/protocol/README.md
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/baton RENAME protocol.md)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/README.md
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/baton RENAME deploy.md)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/examples/
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/baton/examples)
# The `baton` Python package (python/baton), for Debian's python3: /usr/lib/python3/dist-packages
# is on its sys.path for every 3.x, and the package is pure Python (no byte code shipped).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/baton
        DESTINATION lib/python3/dist-packages
        FILES_MATCHING PATTERN "*.py"
        PATTERN "__pycache__" EXCLUDE)

if(BATON_NATIVE)
  message(STATUS "baton package: built with -march=native, it runs only on CPUs like this one; "
                 "configure with -DBATON_NATIVE=OFF for a portable package")
endif()

# Generated at build time from the two CLI11 apps (cli_docs/): baton(1) and baton-worker(1), the
# bash and zsh completions. POSIX only: the Windows build has no man pages, and a cross build
# cannot run the binaries it makes.
if(UNIX AND NOT CMAKE_CROSSCOMPILING)
  set(baton_docs_dir ${PROJECT_BINARY_DIR}/docs)
  file(MAKE_DIRECTORY ${baton_docs_dir})
  set(baton_generate ${PROJECT_SOURCE_DIR}/cmake/generate_file.cmake)
  set(baton_docs_outputs)
  function(baton_generated out command_target gzip)
    set(command ${ARGN})
    list(JOIN command "|" command_arg)
    add_custom_command(
      OUTPUT ${baton_docs_dir}/${out}
      COMMAND ${CMAKE_COMMAND} "-DCOMMAND=${command_arg}" -DOUT=${baton_docs_dir}/${out}
              -DGZIP=${gzip} -P ${baton_generate}
      DEPENDS ${command_target} ${baton_generate}
      COMMENT "Generating ${out} from the command line definition"
      VERBATIM)
    set(baton_docs_outputs ${baton_docs_outputs} ${baton_docs_dir}/${out} PARENT_SCOPE)
  endfunction()
  baton_generated(baton.1.gz baton ON $<TARGET_FILE:baton> __generate man)
  baton_generated(baton-worker.1.gz baton-worker ON $<TARGET_FILE:baton-worker> --generate-man)
  baton_generated(baton.bash baton OFF $<TARGET_FILE:baton> __generate bash)
  baton_generated(_baton baton OFF $<TARGET_FILE:baton> __generate zsh)
  # Part of ALL: cpack installs from the build tree without building it first.
  add_custom_target(baton_cli_docs_files ALL DEPENDS ${baton_docs_outputs})
  install(FILES ${baton_docs_dir}/baton.1.gz ${baton_docs_dir}/baton-worker.1.gz
          DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
  install(FILES ${baton_docs_dir}/baton.bash RENAME baton
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/bash-completion/completions)
  install(FILES ${baton_docs_dir}/_baton
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/zsh/vendor-completions)
  if(TARGET baton_integration_tests)
    add_dependencies(baton_integration_tests baton_cli_docs_files)
    target_compile_definitions(baton_integration_tests PRIVATE BATON_DOCS_DIR="${baton_docs_dir}")
  endif()
endif()

# Debian's copyright file (DEP-5) and changelog, which lintian requires of every package.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/copyright
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/baton)
# Each override says why in the file; the package test fails on any other warning.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides RENAME baton)
if(UNIX)
  set(BATON_DEB_VERSION "${PROJECT_VERSION}-1")
  configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/changelog.in
                 ${PROJECT_BINARY_DIR}/deb/changelog.Debian @ONLY)
  add_custom_command(
    OUTPUT ${PROJECT_BINARY_DIR}/deb/changelog.Debian.gz
    COMMAND ${CMAKE_COMMAND} -DINPUT=${PROJECT_BINARY_DIR}/deb/changelog.Debian
            -DOUT=${PROJECT_BINARY_DIR}/deb/changelog.Debian.gz -DGZIP=ON
            -P ${PROJECT_SOURCE_DIR}/cmake/generate_file.cmake
    DEPENDS ${PROJECT_BINARY_DIR}/deb/changelog.Debian ${PROJECT_SOURCE_DIR}/cmake/generate_file.cmake
    VERBATIM)
  add_custom_target(baton_deb_changelog ALL DEPENDS ${PROJECT_BINARY_DIR}/deb/changelog.Debian.gz)
  install(FILES ${PROJECT_BINARY_DIR}/deb/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/baton)
  if(TARGET baton_integration_tests)
    add_dependencies(baton_integration_tests baton_deb_changelog)
  endif()
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME baton)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${BATON_DEB_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "supervisor that keeps long ML training runs alive through memory leaks")
# Wrapped by hand: CPack copies each line as it is, and Debian policy wants them within 80 columns.
set(CPACK_PACKAGE_DESCRIPTION
    "baton splits each training run into short shards and runs every shard in\na fresh worker process that resumes from the last checkpoint, recycling a\nworker that passes its memory budget. It runs as a system service\n(baton.service) or a per-user one (systemctl --user), with a control socket.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# A placeholder for the project's public repository, until it has one.
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/baton-project/baton")
# Revision 1 of the upstream version: a non-native package, whose changelog is changelog.Debian.
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
# Exactly what the binaries link (readelf -d: NEEDED), as Debian 12 names them; adduser for the
# postinst, init-system-helpers for deb-systemd-invoke and deb-systemd-helper in prerm/postrm. python3 only for the example workers and the `baton` Python package.
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libboost-filesystem1.81.0, libxxhash0, libsystemd0, libgomp1, libstdc++6 (>= 12), libgcc-s1, libc6 (>= 2.36), adduser, init-system-helpers (>= 1.54~)")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3, python3-xxhash, python3-torch")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)

# The package test runs cpack on this build tree (seconds); ctest -L package picks it alone.
# Hidden from Catch's test discovery ([.]) so the default run does not build the package twice.
if(BATON_BUILD_TESTS AND TARGET baton_integration_tests)
  add_test(NAME package_deb COMMAND baton_integration_tests "[package]")
  set_tests_properties(package_deb PROPERTIES LABELS "package;integration" TIMEOUT 120
                       ENVIRONMENT "BATON_CPACK_CONFIG=${PROJECT_BINARY_DIR}/CPackConfig.cmake")
endif()
