# tests/check_layers.cmake — fails when a source file includes a header of a layer
# above its own (docs/architecture.md, Layers). Run by the build's
# check_layers target: cmake -DROOT=<repo> -P tests/check_layers.cmake
#
# Each folder is a layer; ALLOW_<folder> lists the folders its files may
# include from (its own and those below). Includes are written with their
# folder ("engine/base/common.h"), so the folder of an include is its prefix.
set(LAYERS engine/base engine/backend kernels engine/model adapters engine/runtime engine/runtime/constrain db gateway/http gateway cli)
set(ALLOW_engine/base    engine/base)
set(ALLOW_engine/backend engine/base engine/backend)
set(ALLOW_kernels        engine/base engine/backend kernels)
set(ALLOW_engine/model   engine/base engine/backend engine/model)
set(ALLOW_adapters       engine/base engine/backend engine/model adapters)
set(ALLOW_engine/runtime engine/base engine/backend engine/model adapters engine/runtime engine/runtime/constrain)
# constrained decoding is part of the runtime's library, below the engine: it uses the tokenizer, not the engine
set(ALLOW_engine/runtime/constrain engine/base engine/model engine/runtime/constrain)
set(ALLOW_db             engine/base db)
set(ALLOW_gateway/http   engine/base gateway/http)
set(ALLOW_gateway        engine/base engine/backend engine/model adapters engine/runtime engine/runtime/constrain db gateway/http gateway)
set(ALLOW_cli            ${LAYERS})

# the layer of a repository path: the longest layer folder it lies in
function(layer_of path out)
  set(best "")
  foreach(l ${LAYERS})
    string(LENGTH "${l}/" n)
    string(SUBSTRING "${path}" 0 ${n} head)
    if(head STREQUAL "${l}/")
      string(LENGTH "${best}" bn)
      string(LENGTH "${l}" ln)
      if(ln GREATER bn)
        set(best "${l}")
      endif()
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()

set(bad 0)
foreach(l ${LAYERS})
  file(GLOB files "${ROOT}/${l}/*.c" "${ROOT}/${l}/*.h" "${ROOT}/${l}/*.cu" "${ROOT}/${l}/*.cuh")
  foreach(f ${files})
    file(RELATIVE_PATH rel "${ROOT}" "${f}")
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" inc "${line}")
      if(NOT EXISTS "${ROOT}/${inc}")
        if(rel STREQUAL "gateway/http/conn.c" AND inc STREQUAL "khash.h")
          continue()  # h2o's own include, answered by gateway/http/h2o_compat
        endif()
        message(SEND_ERROR "${rel}: #include \"${inc}\" does not name a file from the repository root")
        set(bad 1)
        continue()
      endif()
      layer_of("${inc}" to)
      if(to STREQUAL "")
        continue()  # generated or test support files
      endif()
      list(FIND ALLOW_${l} "${to}" ok)
      if(ok EQUAL -1)
        message(SEND_ERROR "${rel} (layer ${l}) includes ${inc} (layer ${to}): layers only include downwards")
        set(bad 1)
      endif()
    endforeach()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "layer check failed")
endif()
