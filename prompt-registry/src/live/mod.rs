//! A small OpenAI-compatible client for llama.cpp's server (to be written).
