#include <cstdio>
int main() {
  std::fprintf(stderr, "baton-worker: not built yet\n");
  return 1;
}
