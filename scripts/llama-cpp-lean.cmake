# Included right after llama.cpp's own project() call (CMAKE_PROJECT_llama.cpp_INCLUDE, set by
# scripts/install-llama-cpp). llama-cpp-python forces LLAMA_BUILD_COMMON on, but its Python code loads only
# libllama and libggml*: the common library (chat templates, argument parsing, an HTTP client; about a third
# of the compile time) is never loaded, so we turn it off before llama.cpp reads the option.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
message(STATUS "minions: building libllama and libggml only (no common library, tools, examples, tests)")
