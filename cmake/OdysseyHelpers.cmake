# Shared CMake helpers: warnings and the one way to declare a test.

# odyssey_warnings(<target>): the project's warning set; errors when ODYSSEY_WERROR is on.
function(odyssey_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
      -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough
      $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>>)  # GCC 12 false positives on std::string (PR 105329)
  if(ODYSSEY_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# The Python with the pinned reference libraries (transformers, tokenizers, PEFT) that
# parity tests run to produce oracle data; setup.sh passes the LibTorch venv's python.
set(ODYSSEY_PYTHON "" CACHE FILEPATH "Python with transformers/tokenizers for parity tests")
# The Python with ms-swift 4.6 (packaging/install-deps.sh's venv-swift): tests/reference/swift_corpus.py.
set(ODYSSEY_SWIFT_PYTHON "" CACHE FILEPATH "Python with ms-swift for the ms-swift bridge's corpus test")

# odyssey_add_test(NAME <name> SOURCES <files...> [LIBS <targets...>] [LABELS <labels...>]
#                  [TIMEOUT <s>])
# Builds a Qt Test executable and registers it with ctest. Labels: gpu, slow, gui.
function(odyssey_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  set_target_properties(${T_NAME} PROPERTIES AUTOMOC ON)
  target_link_libraries(${T_NAME} PRIVATE Qt6::Test ${T_LIBS})
  target_compile_definitions(${T_NAME} PRIVATE
    ODYSSEY_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    ODYSSEY_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data"
    ODYSSEY_PYTHON="${ODYSSEY_PYTHON}")
  odyssey_warnings(${T_NAME})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  # One intra-op thread per process: `ctest -j N` already runs N tests at once, and LibTorch's
  # default (a thread per core in every process, its OpenMP workers spin-waiting) thrashed on
  # CI's 2 cores: the quickstart run of tst_train_run took 124 s beside tst_parallel_run, 20 s
  # alone, 35 s beside it with one thread. The engine keeps a set OMP_NUM_THREADS
  # (docs/training.md), as do the Python oracles.
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;OMP_NUM_THREADS=1")
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()

# odyssey_torch_target(<target>): link LibTorch and precompile <torch/torch.h> for the
# target's sources (LibTorch's headers dominate compile time on small machines; ccache
# is configured for PCH in the top-level CMakeLists).
function(odyssey_torch_target target)
  # libstdc++ must come before libtorch in the dynamic link order: torch 2.11's
  # libtorch.so exports its own std::filesystem symbols, and binding to those made
  # std::filesystem::remove_all crash in programs that link it.
  target_link_libraries(${target} PUBLIC "-Wl,--no-as-needed" stdc++ "-Wl,--as-needed" ${TORCH_LIBRARIES})
  target_compile_definitions(${target} PUBLIC ODYSSEY_HAVE_TORCH=1)
  target_precompile_headers(${target} PRIVATE <torch/torch.h>)
endfunction()
