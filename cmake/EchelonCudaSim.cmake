# The CUDA emulation build (-DECHELON_CUDA_SIM=ON): the real cuda/*.cpp and cuda/kernels/*.cu are
# compiled by the host C++ compiler against cuda/sim/include (stand-ins for cuda_runtime.h,
# cublas_v2.h and CUB), and every launch runs on the CPU (cuda/sim/scheduler.cpp). The library
# defines ECHELON_WITH_CUDA=1 as the real build does, so every CUDA runtime path in tensor/,
# data/ and parallel/ compiles and runs. No CUDA toolkit is needed.
find_package(Boost 1.66 REQUIRED COMPONENTS context)

file(GLOB echelon_sim_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cuda/sim/*.cpp)
file(GLOB echelon_sim_cuda_cpp CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cuda/*.cpp)
# tools/cudasim-mutants.sh points this at a copy of the kernels with one planted bug.
set(ECHELON_CUDASIM_KERNELS ${PROJECT_SOURCE_DIR}/cuda/kernels CACHE PATH
    "Folder of the .cu files the emulation build compiles")
file(GLOB echelon_sim_cu CONFIGURE_DEPENDS ${ECHELON_CUDASIM_KERNELS}/*.cu)
# .cu files are C++ here: `-x c++` (the compiler would not take the extension otherwise), and
# nvcc's `#pragma unroll` is not a warning.
set_source_files_properties(${echelon_sim_cu} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++;-Wno-unknown-pragmas")
target_sources(echelon PRIVATE ${echelon_sim_sources} ${echelon_sim_cuda_cpp} ${echelon_sim_cu})
target_include_directories(echelon PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/cuda/sim/include>)
target_compile_definitions(echelon PUBLIC ECHELON_WITH_CUDA=1 ECHELON_CUDA_SIM=1)
target_link_libraries(echelon PUBLIC Boost::context)
message(STATUS "Echelon: CUDA emulation ON (cuda/sim): kernels and streams run on the CPU; "
               "cuDNN OFF (its path is GPU-only), NCCL OFF")
