# Helpers that give every actorllm target the same flags and layout.

# Compile options shared by all C++ targets of the project.
function(actorllm_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow>)
  if(ACTORLLM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(ACTORLLM_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  if(ACTORLLM_SANITIZE)
    # -Wno-mismatched-new-delete: at -O1 (scripts/test.sh's sanitizer build) GCC 12 reports asio's coroutine frames,
    # allocated by asio's recycling allocator and freed by its sized delete, as mismatched; ASan checks every new/delete
    # pair at run time instead (alloc_dealloc_mismatch).
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined
                                             -fno-omit-frame-pointer -fno-sanitize-recover=undefined
                                             -Wno-mismatched-new-delete>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# A static library made of every .cpp under `dir` (recursively; NON_RECURSIVE: only `dir`'s own files; EXCLUDE regex:
# leave out the paths that match, e.g. a subfolder that another target builds). Adding a file needs no CMake edit.
function(actorllm_add_library name dir)
  cmake_parse_arguments(_opt "NON_RECURSIVE" "EXCLUDE" "" ${ARGN})
  if(_opt_NON_RECURSIVE)
    file(GLOB _srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${dir}/*.cpp)
  else()
    file(GLOB_RECURSE _srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${dir}/*.cpp)
  endif()
  if(_opt_EXCLUDE)
    list(FILTER _srcs EXCLUDE REGEX "${_opt_EXCLUDE}")
  endif()
  if(NOT _srcs)
    # A folder whose first sources are still to come: an empty stand-in keeps the dependents linking.
    set(_srcs ${PROJECT_SOURCE_DIR}/cmake/empty.cpp)
  endif()
  add_library(${name} STATIC ${_srcs})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                            $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                            $<INSTALL_INTERFACE:include>)
  target_link_libraries(${name} PUBLIC Threads::Threads fmt::fmt)
  actorllm_target_defaults(${name})
  if(ACTORLLM_SANITIZE)
    target_link_options(${name} INTERFACE -fsanitize=address,undefined)
  endif()
endfunction()
