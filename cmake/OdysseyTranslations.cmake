# Qt Linguist tools: lrelease compiles resources/translations/*.ts into .qm catalogues that
# are embedded as Qt resources (:/i18n/...), and tests/ui runs lupdate to check that every
# tr() string of the sources is translated. Debian packages them in qt6-l10n-tools; the
# build fails here, naming the package, rather than producing a window without its
# translations.
set(_qt_tool_dirs)
if(QT6_INSTALL_PREFIX)
  foreach(_d ${QT6_INSTALL_BINS} ${QT6_INSTALL_LIBEXECS})
    list(APPEND _qt_tool_dirs "${QT6_INSTALL_PREFIX}/${_d}")
  endforeach()
endif()
list(APPEND _qt_tool_dirs /usr/lib/qt6/bin)
find_program(ODYSSEY_LRELEASE NAMES lrelease-qt6 lrelease HINTS ${_qt_tool_dirs}
             DOC "Qt 6 lrelease (Debian: qt6-l10n-tools)")
find_program(ODYSSEY_LUPDATE NAMES lupdate-qt6 lupdate HINTS ${_qt_tool_dirs}
             DOC "Qt 6 lupdate (Debian: qt6-l10n-tools)")
string(CONCAT _l10n_help "On Debian 12: apt-get install qt6-l10n-tools (packaging/install-deps.sh installs it), "
    "or pass -DODYSSEY_LRELEASE=... -DODYSSEY_LUPDATE=..., or configure with -DODYSSEY_BUILD_GUI=OFF.")
if(NOT ODYSSEY_LRELEASE OR NOT ODYSSEY_LUPDATE)
  message(FATAL_ERROR "Qt 6 lrelease/lupdate not found (looked in ${_qt_tool_dirs} and PATH): the "
                      "window's translations cannot be built. ${_l10n_help}")
endif()
# A PATH lupdate may be qtchooser's wrapper, which runs Qt 5's tools or none: ask each its version.
foreach(_tool ODYSSEY_LRELEASE ODYSSEY_LUPDATE)
  execute_process(COMMAND ${${_tool}} -version OUTPUT_VARIABLE _out ERROR_VARIABLE _out RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT _out MATCHES "version 6\\.")
    string(STRIP "${_out}" _out)
    set(_found "${${_tool}}")
    unset(${_tool} CACHE)  # searched again at the next configure, once the package is installed
    message(FATAL_ERROR "${_found} is not Qt 6's (it answered -version with: ${_out}); the window's "
                        "translations need Qt 6's lrelease and lupdate. ${_l10n_help}")
  endif()
endforeach()
message(STATUS "Qt Linguist tools: ${ODYSSEY_LRELEASE}, ${ODYSSEY_LUPDATE}")

# odyssey_add_translations(<target> <ts files...>): compiles each .ts with lrelease and
# embeds the .qm files in <target> under :/i18n/.
function(odyssey_add_translations target)
  set(_qms)
  foreach(_ts ${ARGN})
    get_filename_component(_name ${_ts} NAME_WE)
    set(_qm ${CMAKE_CURRENT_BINARY_DIR}/i18n/${_name}.qm)
    add_custom_command(
      OUTPUT ${_qm}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/i18n
      # -nounfinished: an untranslated message shows its English source, never an empty one.
      COMMAND ${ODYSSEY_LRELEASE} -silent -nounfinished ${_ts} -qm ${_qm}
      DEPENDS ${_ts}
      COMMENT "lrelease ${_name}.ts"
      VERBATIM)
    set_source_files_properties(${_qm} PROPERTIES GENERATED TRUE)
    list(APPEND _qms ${_qm})
  endforeach()
  qt_add_resources(${target} "${target}_translations" PREFIX /i18n BASE ${CMAKE_CURRENT_BINARY_DIR}/i18n FILES ${_qms})
endfunction()

# `ninja update-translations`: lupdate over the window's sources into the committed catalogue
# (new messages arrive unfinished; tests/ui/tst_translations fails until they are translated).
# The arguments are the ones tst_translations runs lupdate with.
add_custom_target(update-translations
  COMMAND ${ODYSSEY_LUPDATE} ui app/odyssey -extensions cpp,h -no-obsolete -locations none
          -source-language en -target-language zh_CN -ts resources/translations/odyssey_zh_CN.ts
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
  COMMENT "lupdate: resources/translations/odyssey_zh_CN.ts"
  VERBATIM)
