# Runs at install time (install(CODE) in packaging/CMakeLists.txt): copies every shared
# library the installed programs load that is not part of the Debian system — LibTorch and
# the CUDA libraries of the torch wheel, as the build found them — into <prefix>/lib/odyssey,
# and gives each copy the RUNPATH $ORIGIN so they find one another there. The programs carry
# RUNPATH $ORIGIN/../lib/odyssey (app/CMakeLists.txt), so an installed tree runs without the
# build's virtual environment.
#
# Inputs: ODYSSEY_BUNDLE_PROGRAMS (build-tree executables, whose build RPATH resolves their
# libraries), ODYSSEY_BUNDLE_DEST (absolute destination, DESTDIR included), ODYSSEY_PATCHELF.
#
# System libraries (/lib, /usr/lib: Qt, yaml-cpp, PCRE2, glibc …) stay out: the Debian
# package declares them as dependencies (dpkg-shlibdeps). The NVIDIA driver's own libraries
# (libcuda, libnvidia-ml) stay out too: they belong to the machine's driver, and LibTorch
# loads them at run time where a GPU is present.

cmake_policy(VERSION 3.25)  # install scripts run without the project's policies (IN_LIST)

file(GET_RUNTIME_DEPENDENCIES
  EXECUTABLES ${ODYSSEY_BUNDLE_PROGRAMS}
  RESOLVED_DEPENDENCIES_VAR resolved
  UNRESOLVED_DEPENDENCIES_VAR unresolved
  CONFLICTING_DEPENDENCIES_PREFIX conflict
  PRE_EXCLUDE_REGEXES "^libcuda\\.so" "^libnvidia-ml\\.so" "^ld-linux" "^linux-vdso"
  POST_EXCLUDE_REGEXES "^/lib/" "^/lib64/" "^/usr/lib/" "^/usr/lib64/")

if(unresolved)
  message(FATAL_ERROR "odyssey install: these libraries the programs need were not found: ${unresolved}")
endif()

# Libraries LibTorch loads with dlopen (cuDNN's engine libraries, NVRTC's builtins,
# torch_cuda_linalg …) are not in any NEEDED list: every library beside one the programs
# link comes along, except the Python binding (it needs libpython).
# Siblings come under their own file names (symlinks skipped: wheels name their files by
# soname), and a file already bundled under a linked name is not copied twice.
set(bundle ${resolved})
set(real_of_resolved "")
foreach(lib IN LISTS resolved)
  file(REAL_PATH "${lib}" real)
  list(APPEND real_of_resolved "${real}")
endforeach()
foreach(lib IN LISTS resolved)
  get_filename_component(dir "${lib}" DIRECTORY)
  file(GLOB siblings LIST_DIRECTORIES false "${dir}/*.so" "${dir}/*.so.*")
  foreach(s IN LISTS siblings)
    file(REAL_PATH "${s}" real_s)  # the folder may be written with ".." (torch/lib/../../nvidia/…)
    if(IS_SYMLINK "${s}" OR real_s IN_LIST real_of_resolved)
      continue()
    endif()
    list(APPEND bundle "${s}")
  endforeach()
endforeach()
# Left out: plugins for stacks LibTorch does not use here that would pull their own
# dependencies (NVSHMEM's MPI/PMIx/UCX/libfabric/InfiniBand bootstraps and transports,
# cuFile's RDMA, the profiler's perf-counter helpers) and API shims nothing calls
# (nvblas, cufftw).
list(FILTER bundle EXCLUDE REGEX
     "/(libtorch_python|libshm|nvshmem_bootstrap_|nvshmem_transport_|libcufile_rdma|libnvperf_|libpcsamplingutil|libcheckpoint|libnvblas|libcufftw)[^/]*$")
list(REMOVE_DUPLICATES bundle)

# One library found in two places (libcudart: the CUDA toolkit's, which Odyssey's kernels
# link, and the torch wheel's): the wheel's copy, the one LibTorch was built and tested with.
foreach(name IN LISTS conflict_FILENAMES)
  set(pick "")
  foreach(path IN LISTS conflict_${name})
    if(path MATCHES "/nvidia/" AND NOT pick)
      set(pick "${path}")
    endif()
  endforeach()
  if(NOT pick)
    list(GET conflict_${name} 0 pick)
  endif()
  message(STATUS "odyssey install: ${name} found in several places (${conflict_${name}}); bundling ${pick}")
  list(APPEND bundle "${pick}")
endforeach()
list(REMOVE_DUPLICATES bundle)

# One file per name: a library the programs link comes first and wins over a sibling of the
# same name from another folder (wheels such as nvidia-nccl-cu13 ship their own copies).
set(names "")
set(unique "")
foreach(lib IN LISTS bundle)
  get_filename_component(name "${lib}" NAME)
  if(NOT name IN_LIST names)
    list(APPEND names "${name}")
    list(APPEND unique "${lib}")
  endif()
endforeach()
set(bundle ${unique})

file(MAKE_DIRECTORY "${ODYSSEY_BUNDLE_DEST}")
list(LENGTH bundle count)
message(STATUS "odyssey install: bundling ${count} libraries into ${ODYSSEY_BUNDLE_DEST}")
foreach(lib IN LISTS bundle)
  get_filename_component(name "${lib}" NAME)
  file(REAL_PATH "${lib}" real)  # a symlink's target, copied under the name that is asked for
  set(dest "${ODYSSEY_BUNDLE_DEST}/${name}")
  file(REMOVE "${dest}")
  file(COPY_FILE "${real}" "${dest}")
  file(CHMOD "${dest}" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  execute_process(COMMAND "${ODYSSEY_PATCHELF}" --set-rpath "\$ORIGIN" "${dest}"
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "odyssey install: patchelf --set-rpath failed on ${dest}: ${err}")
  endif()
endforeach()
