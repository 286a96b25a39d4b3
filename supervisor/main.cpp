#include <cstdio>
int main() {
  std::fprintf(stderr, "baton: not built yet\n");
  return 1;
}
