# troupe_add_module(NAME DEPS <targets...>): defines troupe_NAME from NAME/src/*.cpp with the public
# headers in NAME/include. A module without sources yet is an INTERFACE library.
function(troupe_add_module name)
  cmake_parse_arguments(ARG "" "" "DEPS;PRIVATE_DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.cpp)
  set(target troupe_${name})
  if(srcs)
    add_library(${target} STATIC ${srcs})
    target_include_directories(${target} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
                                         PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
    target_link_libraries(${target} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  else()
    add_library(${target} INTERFACE)
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/include)
      target_include_directories(${target} INTERFACE ${CMAKE_CURRENT_SOURCE_DIR}/include)
    endif()
    target_link_libraries(${target} INTERFACE ${ARG_DEPS})
  endif()
endfunction()

# The few CAF headers the actors use, precompiled once and reused by every CAF-using target.
function(troupe_use_caf_pch target)
  if(NOT TARGET troupe_caf_pch)
    add_library(troupe_caf_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/caf_pch.cpp)
    target_link_libraries(troupe_caf_pch PUBLIC troupe_caf)
    target_precompile_headers(troupe_caf_pch PUBLIC ${PROJECT_SOURCE_DIR}/cmake/caf_pch.hpp)
  endif()
  target_link_libraries(${target} PRIVATE troupe_caf)
  target_precompile_headers(${target} REUSE_FROM troupe_caf_pch)
endfunction()

# A unity build for the modules whose sources repeat the same heavy headers (CAF, Asio, Cap'n Proto,
# nlohmann): their .cpp files compiled 8 to a translation unit. Measured on 2 cores from scratch
# (docs/benchmarks.md, "A newcomer's first command"): troupe_actors' objects 223 s -> 74 s. Files
# of such a module share one translation unit, so two of them may not define the same name in an
# anonymous namespace (a helper of one file's own goes in a namespace named after the file, or in
# a header both include). TROUPE_UNITY=OFF builds file by file (to check each file's includes).
option(TROUPE_UNITY "unity builds for the CAF-heavy modules" ON)
function(troupe_unity_build target)
  if(TROUPE_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()
