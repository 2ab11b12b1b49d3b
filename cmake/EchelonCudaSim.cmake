# The CUDA emulation build (-DECHELON_CUDA_SIM=ON, docs/cudasim.md): the real cuda/*.cpp and
# cuda/kernels/*.cu are compiled by the host C++ compiler against cuda/sim/include (stand-ins for
# cuda_runtime.h, cublas_v2.h and CUB), and every launch runs on the CPU (cuda/sim/scheduler.cpp).
# base defines ECHELON_WITH_CUDA=1 as the real build does (plus ECHELON_CUDA_SIM=1), so every CUDA
# runtime path in tensor/, data/ and parallel/ compiles and runs. No CUDA toolkit is needed.
#
#   base <- cudasim (cuda/sim: the emulator; of Echelon it knows only base) <- cuda <- tensor ...
find_package(Boost 1.66 REQUIRED COMPONENTS context)

# The emulator: its own target, one layer below cuda. Its headers are <echelon/cuda/sim/...>
# through its own include root; cuda/sim/include holds <cuda_runtime.h>, <cublas_v2.h>, <cub/...>.
file(GLOB echelon_sim_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cuda/sim/*.cpp)
list(FILTER echelon_sim_sources EXCLUDE REGEX "/nccl\\.cpp$")  # its own target, below
add_library(echelon_cudasim STATIC ${echelon_sim_sources})
add_library(echelon::cudasim ALIAS echelon_cudasim)
set(sim_root ${PROJECT_BINARY_DIR}/include/cudasim)
file(MAKE_DIRECTORY ${sim_root}/echelon/cuda)
file(CREATE_LINK ${PROJECT_SOURCE_DIR}/cuda/sim ${sim_root}/echelon/cuda/sim SYMBOLIC)
target_include_directories(echelon_cudasim PUBLIC ${sim_root} ${PROJECT_SOURCE_DIR}/cuda/sim/include)
# base for the build's flags (sanitizers, definitions) and the environment readers (base/env.h):
# the emulator includes nothing else of Echelon.
target_link_libraries(echelon_cudasim PUBLIC echelon_base Boost::context)
echelon_warnings(echelon_cudasim)

# The emulated NCCL (cuda/sim/nccl.h): on MPI, so only with MPI; the emulator itself needs none.
# CMakeLists.txt links it into parallel with ECHELON_WITH_NCCL, as the real build links libnccl.
set(ECHELON_CUDASIM_NCCL OFF)
if(ECHELON_HAVE_MPI)
  add_library(echelon_cudasim_nccl STATIC ${PROJECT_SOURCE_DIR}/cuda/sim/nccl.cpp)
  target_link_libraries(echelon_cudasim_nccl PUBLIC echelon_cudasim MPI::MPI_CXX)
  echelon_warnings(echelon_cudasim_nccl)
  set(ECHELON_CUDASIM_NCCL ON)
endif()

# The cuda layer: cuda/*.cpp by the layer's glob, the kernels added here as C++.
echelon_layer(cuda DEPS echelon_kernels echelon_cudasim)
# tools/cudasim-mutants.sh points this at a copy of the kernels with one planted bug.
set(ECHELON_CUDASIM_KERNELS ${PROJECT_SOURCE_DIR}/cuda/kernels CACHE PATH
    "Folder of the .cu files the emulation build compiles")
file(GLOB echelon_sim_cu CONFIGURE_DEPENDS ${ECHELON_CUDASIM_KERNELS}/*.cu)
# .cu files are C++ here: `-x c++` (the compiler would not take the extension otherwise), and
# nvcc's `#pragma unroll` is not a warning.
set_source_files_properties(${echelon_sim_cu} PROPERTIES LANGUAGE CXX
                            COMPILE_OPTIONS "-xc++;-Wno-unknown-pragmas")
target_sources(echelon_cuda PRIVATE ${echelon_sim_cu})
message(STATUS "Echelon: CUDA emulation ON (cuda/sim): kernels and streams run on the CPU; "
               "cuDNN OFF (its path is GPU-only), NCCL emulated on MPI ${ECHELON_CUDASIM_NCCL}")
