# Finds cuDNN. Honours CUDNN_ROOT (env or cache): on the GPU machine cuDNN comes as a Python wheel
# (site-packages/nvidia/cudnn/{include,lib}), not under /usr/local/cuda.
# Defines CUDNN_FOUND, CUDNN_VERSION and the imported target CUDNN::cudnn.
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda /usr)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_cudnn_hints} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_major REGEX "#define CUDNN_MAJOR [0-9]+")
  string(REGEX MATCH "[0-9]+" CUDNN_VERSION "${_cudnn_major}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
