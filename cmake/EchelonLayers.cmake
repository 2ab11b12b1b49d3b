# Each folder of the library is one static-library target ("layer") that links only the layers
# below it:
#   base <- kernels <- cuda <- tensor <- autograd <- layers <- parallel <- app;  data <- tensor
# A layer's headers are reachable as <echelon/FOLDER/...> only through its own include root
# (PROJECT_BINARY_DIR/include/FOLDER/echelon/FOLDER, a link to the source folder), which CMake
# passes on to the layers that link it. So a file that includes a layer above its own fails to
# compile: the build enforces the layering (tools/check-layering.sh proves it in CI).

# echelon_layer(FOLDER [HEADERS_ONLY] [SOURCE_DIRS dir...] [DEPS target...])
# SOURCE_DIRS default to FOLDER; sources are picked up by glob (a new op file needs no CMake edit;
# CONFIGURE_DEPENDS makes the build notice added files). A layer without sources is INTERFACE.
function(echelon_layer folder)
  cmake_parse_arguments(LAYER "HEADERS_ONLY" "" "SOURCE_DIRS;DEPS" ${ARGN})
  if(LAYER_HEADERS_ONLY)
    set(LAYER_SOURCE_DIRS)
  elseif(NOT LAYER_SOURCE_DIRS)
    set(LAYER_SOURCE_DIRS ${folder})
  endif()
  set(target echelon_${folder})
  set(root ${PROJECT_BINARY_DIR}/include/${folder})
  file(MAKE_DIRECTORY ${root}/echelon)
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/echelon/${folder} SYMBOLIC)

  set(sources)
  foreach(dir IN LISTS LAYER_SOURCE_DIRS)
    set(patterns ${PROJECT_SOURCE_DIR}/${dir}/*.cpp)
    if(ECHELON_WITH_CUDA)
      list(APPEND patterns ${PROJECT_SOURCE_DIR}/${dir}/*.cu)
    endif()
    file(GLOB dir_sources CONFIGURE_DEPENDS ${patterns})
    list(APPEND sources ${dir_sources})
  endforeach()

  if(sources)
    add_library(${target} STATIC ${sources})
    set(scope PUBLIC)
    echelon_warnings(${target})
  else()
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
  endif()
  add_library(echelon::${folder} ALIAS ${target})
  target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${root}>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} ${scope} ${LAYER_DEPS})
  set_property(GLOBAL APPEND PROPERTY ECHELON_LAYERS ${target})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/echelon/${folder}
          FILES_MATCHING PATTERN "*.h" PATTERN "sim" EXCLUDE)
endfunction()
