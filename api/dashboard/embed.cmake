# embed.cmake - compile the dashboard's files into the coordinator.
#   cmake -DOUT=<file.c> -DINPUTS=<a;b;...> -P embed.cmake
# writes, for each input named like "app.js":
#   const unsigned char sl__dash_app_js[];   the bytes, plus a terminating NUL
#   const size_t sl__dash_app_js_len;        the byte count (without the NUL)
# Run at build time by a custom command of api/CMakeLists.txt, so editing a
# file under api/dashboard/ rebuilds the server. Needs nothing but CMake.
set(text "/* generated from api/dashboard/ by api/dashboard/embed.cmake: do not edit */\n")
string(APPEND text "#include <stddef.h>\n")
foreach(input IN LISTS INPUTS)
  get_filename_component(name "${input}" NAME)
  string(MAKE_C_IDENTIFIER "${name}" id)
  file(READ "${input}" hex HEX)
  string(LENGTH "${hex}" len)
  math(EXPR len "${len} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  # 16 bytes a line
  string(REPEAT "0x[0-9a-f][0-9a-f]," 16 line_re)
  string(REGEX REPLACE "(${line_re})" "\\1\n" hex "${hex}")
  string(APPEND text "const unsigned char sl__dash_${id}[] = {\n${hex}0x00};\n")
  string(APPEND text "const size_t sl__dash_${id}_len = ${len};\n")
endforeach()
file(WRITE "${OUT}.tmp" "${text}")
file(RENAME "${OUT}.tmp" "${OUT}")
