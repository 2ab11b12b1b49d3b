# Warnings are errors-in-waiting: the project keeps them at zero.
function(echelon_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
  # GCC 12 at -O3 (Release) reports -Wrestrict, -Warray-bounds and -Wstringop-overread inside
  # libstdc++'s own memcpy/memcmp (`"literal" + std::string&&`, vector::insert, comparing
  # vectors: GCC bugs 105329, 107138, fixed in 13): false positives after inlining, not in our
  # code. -O2 builds (RelWithDebInfo, CI's) and Debug keep all three.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    set(false_positives -Wno-restrict -Wno-array-bounds -Wno-stringop-overread)
    target_compile_options(${target} PRIVATE
      "$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:${false_positives}>")
  endif()
endfunction()
