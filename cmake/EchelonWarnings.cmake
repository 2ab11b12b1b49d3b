# Warnings are errors-in-waiting: the project keeps them at zero.
function(echelon_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
  # GCC 12 at -O3 (Release) reports -Wrestrict inside libstdc++ for `"literal" + std::string&&`
  # (GCC bug 105329, fixed in 13): a false positive in the library's own memcpy, not our code.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE
      $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-Wno-restrict>)
  endif()
endfunction()
