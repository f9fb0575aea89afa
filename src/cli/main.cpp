#include <cstdio>
int main() { std::puts("vllm-cpp"); return 0; }
