/* A library that crashes when called: the kernel's segfault line then names
 * its file, whatever the file is called. */
void crash(void)
{
    *(volatile int *)0 = 1;
}
