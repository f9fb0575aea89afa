// The chat page served at GET / (src/server/frontend/chat.html, built into the binary by
// CMake as a string): one self-contained HTML file, no network needs but this server's /v1.
#pragma once
#include <string_view>

namespace vllm::server {

std::string_view chat_page_html();  // generated from frontend/chat.html at build time

}  // namespace vllm::server
