# embed_scripts.cmake: writes OUT, a C file holding each Lua script in
# SCRIPTS as a string, in the order of src/redis/lua/scripts.def (the
# DL_SCRIPT_* enum in src/redis/conns/conns.h).
string(REPLACE "|" ";" SCRIPTS "${SCRIPTS}")
set(body "/* Generated from the .lua files in src/redis/lua by cmake/embed_scripts.cmake. */\n")
string(APPEND body "#include \"redis/conns/conns.h\"\n\n")
set(table "dl_script dl_scripts[DL_SCRIPT_COUNT] = {\n")
foreach(path ${SCRIPTS})
  get_filename_component(name ${path} NAME_WE)
  file(READ ${path} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  string(APPEND body "static const char s_${name}[] = {${hex} 0x00};\n")
  string(APPEND table "    {\"${name}\", s_${name}, \"\"},\n")
endforeach()
string(APPEND table "};\n")
file(WRITE ${OUT}.tmp "${body}\n${table}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
