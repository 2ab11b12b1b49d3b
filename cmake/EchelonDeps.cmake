# Third-party dependencies: Debian packages and the CUDA toolkit only, each found by CMake.
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
# Header-only; the GPU machine has no Debian -dev packages and finds the copy tools/fill-deps.sh
# puts in the ignored .deps/ folder (searched after the system paths).
find_package(nlohmann_json 3.10 CONFIG REQUIRED PATHS ${PROJECT_SOURCE_DIR}/.deps)

set(ECHELON_HAVE_BLAS OFF)
if(ECHELON_BLAS)
  find_package(OpenBLAS CONFIG QUIET)
  if(OpenBLAS_FOUND)
    find_path(ECHELON_CBLAS_INCLUDE cblas.h PATHS ${OpenBLAS_INCLUDE_DIRS} /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas NO_DEFAULT_PATH)
    if(NOT ECHELON_CBLAS_INCLUDE)
      find_path(ECHELON_CBLAS_INCLUDE cblas.h)
    endif()
    set(ECHELON_BLAS_LIB ${OpenBLAS_LIBRARIES})
    set(ECHELON_HAVE_BLAS ON)
  endif()
endif()
message(STATUS "Echelon: OpenBLAS ${ECHELON_HAVE_BLAS}")

# libdeflate (Debian: libdeflate-dev) inflates gzip about twice as fast as zlib: Fashion-MNIST's
# 26 MB training images are part of every run's start-up (issue #10's time to accuracy). Static
# (the GPU machine has no Debian -dev packages: tools/fill-deps.sh copies libdeflate.a and its
# header into .deps/, searched after the system paths). Without it zlib inflates everything.
find_path(ECHELON_LIBDEFLATE_INCLUDE libdeflate.h PATHS ${PROJECT_SOURCE_DIR}/.deps/include)
find_library(ECHELON_LIBDEFLATE_LIB NAMES libdeflate.a deflate
             PATHS ${PROJECT_SOURCE_DIR}/.deps/lib)
set(ECHELON_HAVE_LIBDEFLATE OFF)
if(ECHELON_LIBDEFLATE_INCLUDE AND ECHELON_LIBDEFLATE_LIB)
  set(ECHELON_HAVE_LIBDEFLATE ON)
endif()
message(STATUS "Echelon: libdeflate ${ECHELON_HAVE_LIBDEFLATE}")

find_library(ECHELON_TURBOJPEG_LIB turbojpeg)
find_path(ECHELON_TURBOJPEG_INCLUDE turbojpeg.h)
set(ECHELON_HAVE_TURBOJPEG OFF)
if(ECHELON_TURBOJPEG_LIB AND ECHELON_TURBOJPEG_INCLUDE)
  set(ECHELON_HAVE_TURBOJPEG ON)
endif()
find_library(ECHELON_STB_LIB stb)
find_path(ECHELON_STB_INCLUDE stb/stb_image.h)
set(ECHELON_HAVE_STB OFF)
if(ECHELON_STB_LIB AND ECHELON_STB_INCLUDE)
  set(ECHELON_HAVE_STB ON)
endif()
message(STATUS "Echelon: libjpeg-turbo ${ECHELON_HAVE_TURBOJPEG}, stb_image ${ECHELON_HAVE_STB}")
if(NOT ECHELON_HAVE_TURBOJPEG AND ECHELON_HAVE_STB)
  # One JPEG decoder per build (docs/fuzzing.md): stb renders some JPEGs differently.
  message(WARNING "Echelon: libjpeg-turbo (libturbojpeg0-dev) not found: JPEGs are decoded by "
                  "stb_image, whose pixels differ from builds with libjpeg-turbo")
endif()

if(ECHELON_WITH_CUDA)
  find_package(CUDNN)
  find_package(NCCL)
  message(STATUS "Echelon: cuDNN ${CUDNN_FOUND}, NCCL ${NCCL_FOUND}")
endif()

# MPI for one process per pipeline partition (Debian: libopenmpi-dev, openmpi-bin).
set(ECHELON_HAVE_MPI OFF)
if(NOT ECHELON_MPI STREQUAL "OFF")
  set(MPI_CXX_SKIP_MPICXX ON)  # the C API only, from C++ (no deprecated C++ bindings)
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(ECHELON_HAVE_MPI ON)
    find_program(ECHELON_MPIEXEC NAMES mpirun mpiexec)
  elseif(ECHELON_MPI STREQUAL "ON")
    message(FATAL_ERROR "ECHELON_MPI=ON but MPI was not found (apt-get install libopenmpi-dev)")
  endif()
endif()
message(STATUS "Echelon: MPI ${ECHELON_HAVE_MPI}")
