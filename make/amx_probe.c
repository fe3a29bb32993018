/* Exit 0 only if an AMX tile product runs here and gives the right answer, compiled the way
   llama.cpp's AMX kernels are: the tile configuration is a local struct filled field by field.
   Two things stop it: a virtual machine that lists AMX without enabling its state (the kernel
   refuses the tile permission), and GCC 12, whose _tile_loadconfig tells the optimiser it reads
   8 bytes, so dead-store elimination drops the rows and column widths and every tile instruction
   then faults. The Makefile tries it as is, then with -fno-dse, and builds llama.cpp to match. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

struct tile_config {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static int8_t a[16 * 64], b[16 * 64];
static int32_t c[16 * 16];

__attribute__((noinline)) static void configure(void) {
    _Alignas(64) struct tile_config config = {0};
    config.palette_id = 1;
    for (int t = 0; t < 3; t++) {
        config.rows[t] = 16;
        config.colsb[t] = 64;
    }
    _tile_loadconfig(&config);
}

int main(void) {
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return 1;
    memset(a, 1, sizeof a);
    memset(b, 2, sizeof b);
    configure();
    _tile_zero(2);
    _tile_loadd(0, a, 64);
    _tile_loadd(1, b, 64);
    _tile_dpbssd(2, 0, 1);
    _tile_stored(2, c, 64);
    _tile_release();
    return c[0] == 64 * 1 * 2 ? 0 : 2;
}
