# Given to llama-cpp-python's build as -DCMAKE_PROJECT_INCLUDE=<this file> by the Makefile, with -DLLAVA_BUILD=OFF
# (docs/design/llama-build.md). llama-cpp-python installs llama.cpp's libllama and ggml's libraries beside its
# Python code, and its CMakeLists also builds what inference-top never loads: llama.cpp's `common` library (forced
# on; with cpp-httplib, 110 s of a 253 s build on 2 cores) and, unless LLAVA_BUILD is off, mtmd (multimodal, 44 s;
# the Python side loads it only for an image chat handler).
if(PROJECT_NAME STREQUAL "llama.cpp" AND CMAKE_PROJECT_NAME STREQUAL "llama_cpp")
  # llama.cpp inside llama-cpp-python: `common` neither built nor installed. A plain variable in llama.cpp's folder
  # hides the cache entry llama-cpp-python forces on, and llama.cpp's option() leaves it (policy CMP0077).
  set(LLAMA_BUILD_COMMON OFF)
  return()
endif()
if(NOT PROJECT_NAME STREQUAL "llama_cpp" OR NOT CMAKE_SOURCE_DIR STREQUAL PROJECT_SOURCE_DIR)
  return()  # ggml's own project(), or llama-cpp-python's folders inside another project
endif()

# Once llama-cpp-python's top folder is read, every other target libllama does not link (llama.cpp's vendor hash;
# cpp-httplib goes with `common`) leaves the `all` target; llama, what it links and every ggml target are built.
include("${CMAKE_CURRENT_LIST_DIR}/llama_targets.cmake")

function(_inference_top_python_libs)
  if(NOT TARGET llama)
    message(WARNING "inference-top: llama-cpp-python defines no llama target here; every target is built")
    return()
  endif()
  _inference_top_targets("${CMAKE_SOURCE_DIR}" targets)
  _inference_top_linked(llama needed)
  set(left_out "")
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(t STREQUAL "llama" OR t IN_LIST needed OR t MATCHES "^ggml"
       OR type STREQUAL "INTERFACE_LIBRARY" OR type STREQUAL "UTILITY")
      continue()  # what the wheel installs (llama, ggml and its backends) and custom steps (the build info)
    endif()
    set_property(TARGET ${t} PROPERTY EXCLUDE_FROM_ALL TRUE)
    list(APPEND left_out ${t})
  endforeach()
  list(LENGTH left_out n)
  message(STATUS "inference-top: building libllama and ggml; ${n} other targets left out of `all`: ${left_out}")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _inference_top_python_libs)
