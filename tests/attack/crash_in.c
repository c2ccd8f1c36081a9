/* Loads the library argv[1] and calls its crash(): the process dies of
 * SIGSEGV inside that library. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s LIBRARY\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    void (*crash)(void) = (void (*)(void))dlsym(lib, "crash");
    if (!crash) {
        fprintf(stderr, "no crash() in %s\n", argv[1]);
        return 2;
    }
    crash();
    return 0;
}
