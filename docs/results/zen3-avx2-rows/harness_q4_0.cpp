// Standalone check and timing of the AVX2 Q4_0 x16 rows kernel the patch ships, against llama.cpp's one-row kernel.
#include <immintrin.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <chrono>
#include <cmath>
#include <random>

#define QK8_0 32
typedef uint16_t ggml_half;
struct block_q4_0 { ggml_half d; uint8_t qs[16]; };
struct block_q8_0 { ggml_half d; int8_t qs[32]; };
struct block_q4_0x16 { ggml_half d[16]; uint8_t qs[256]; };

static inline float h2f(ggml_half h) { return _cvtsh_ss(h); }
static inline ggml_half f2h(float f) { return _cvtss_sh(f, 0); }

namespace specdecode_rows {

template <int ROWS>
static inline void q4_0x16_rows_avx2(int nb, const block_q4_0x16 * w, const block_q8_0 * a, const int32_t * sum8,
                                     const float * drow, float * s, size_t bs) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[ROWS][2];
    for (int r = 0; r < ROWS; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int b = 0; b < nb; ++b) {
        __m256i i16[ROWS][2];
        for (int g = 0; g < 4; ++g) {
            const __m256i x0 = _mm256_loadu_si256((const __m256i *) (w[b].qs + 64 * g));
            const __m256i x1 = _mm256_loadu_si256((const __m256i *) (w[b].qs + 64 * g + 32));
            const __m256i wl0 = _mm256_and_si256(x0, low4), wh0 = _mm256_and_si256(_mm256_srli_epi16(x0, 4), low4);
            const __m256i wl1 = _mm256_and_si256(x1, low4), wh1 = _mm256_and_si256(_mm256_srli_epi16(x1, 4), low4);
            for (int r = 0; r < ROWS; ++r) {
                const int32_t * q = (const int32_t *) a[r * nb + b].qs;
                const __m256i ql = _mm256_set1_epi32(q[g]), qh = _mm256_set1_epi32(q[4 + g]);
                const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(wl0, ql), _mm256_maddubs_epi16(wh0, qh));
                const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(wl1, ql), _mm256_maddubs_epi16(wh1, qh));
                i16[r][0] = g == 0 ? p0 : _mm256_add_epi16(i16[r][0], p0);
                i16[r][1] = g == 0 ? p1 : _mm256_add_epi16(i16[r][1], p1);
            }
        }
        const __m256 dcol0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (w[b].d)));
        const __m256 dcol1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (w[b].d + 8)));
        for (int r = 0; r < ROWS; ++r) {
            const __m256i s8 = _mm256_set1_epi32(sum8[r * nb + b]);
            const __m256 dr = _mm256_set1_ps(drow[r * nb + b]);
            const __m256i is0 = _mm256_sub_epi32(_mm256_madd_epi16(i16[r][0], ones), s8);
            const __m256i is1 = _mm256_sub_epi32(_mm256_madd_epi16(i16[r][1], ones), s8);
            acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is0), _mm256_mul_ps(dcol0, dr), acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is1), _mm256_mul_ps(dcol1, dr), acc[r][1]);
        }
    }
    for (int r = 0; r < ROWS; ++r) {
        _mm256_storeu_ps(s + r * bs, acc[r][0]);
        _mm256_storeu_ps(s + r * bs + 8, acc[r][1]);
    }
}

static void gemm(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc) {
    const int nb = n / QK8_0;
    const block_q4_0x16 * w = (const block_q4_0x16 *) vx;
    const block_q8_0 * a = (const block_q8_0 *) vy;
    static thread_local std::vector<int32_t> sum8;
    static thread_local std::vector<float> drow;
    sum8.resize((size_t) nr * nb);
    drow.resize((size_t) nr * nb);
    for (int i = 0; i < nr * nb; ++i) {
        int32_t t = 0;
        for (int j = 0; j < QK8_0; ++j) t += a[i].qs[j];
        sum8[i] = 8 * t;
        drow[i] = h2f(a[i].d);
    }
    for (int r0 = 0; r0 < nr; r0 += ROWMAX) {
        const block_q8_0 * ar = a + (size_t) r0 * nb;
        const int32_t * sr = sum8.data() + (size_t) r0 * nb;
        const float * dr = drow.data() + (size_t) r0 * nb;
        for (int x = 0; x < nc; x += 16) {
            const block_q4_0x16 * wx = w + (size_t) (x / 16) * nb;
            float * out = s + (size_t) r0 * bs + x;
            switch (nr - r0 < ROWMAX ? nr - r0 : ROWMAX) {
                case 1: q4_0x16_rows_avx2<1>(nb, wx, ar, sr, dr, out, bs); break;
                case 2: q4_0x16_rows_avx2<2>(nb, wx, ar, sr, dr, out, bs); break;
                case 3: q4_0x16_rows_avx2<3>(nb, wx, ar, sr, dr, out, bs); break;
#if ROWMAX >= 4
                case 4: q4_0x16_rows_avx2<4>(nb, wx, ar, sr, dr, out, bs); break;
#endif
#if ROWMAX >= 5
                case 5: q4_0x16_rows_avx2<5>(nb, wx, ar, sr, dr, out, bs); break;
#endif
#if ROWMAX >= 6
                case 6: q4_0x16_rows_avx2<6>(nb, wx, ar, sr, dr, out, bs); break;
#endif
#if ROWMAX >= 8
                case 7: q4_0x16_rows_avx2<7>(nb, wx, ar, sr, dr, out, bs); break;
                case 8: q4_0x16_rows_avx2<8>(nb, wx, ar, sr, dr, out, bs); break;
#endif
                default: break;
            }
        }
    }
}
}  // namespace

struct block_q4_0x8 { ggml_half d[8]; uint8_t qs[128]; };
#ifdef STOCK
extern "C" void ggml_cpu_init(void);
extern "C" void ggml_gemv_q4_0_8x8_q8_0(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc);
#endif
int main(int argc, char ** argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 1536, nc = argc > 2 ? atoi(argv[2]) : 8960;
    const int nb = n / 32;
    std::mt19937 rng(1);
    std::vector<block_q4_0> W((size_t) nc * nb);
    for (auto & b : W) { b.d = f2h((rng() % 1000) / 30000.0f + 0.001f); for (auto & q : b.qs) q = rng() & 0xFF; }
    // repack sixteen columns a block, four-byte interleave
    std::vector<block_q4_0x16> R((size_t) nc / 16 * nb);
    for (int x = 0; x < nc / 16; ++x)
        for (int b = 0; b < nb; ++b) {
            block_q4_0x16 & o = R[(size_t) x * nb + b];
            for (int c = 0; c < 16; ++c) o.d[c] = W[(size_t) (16 * x + c) * nb + b].d;
            for (int g = 0; g < 4; ++g)
                for (int c = 0; c < 16; ++c) memcpy(&o.qs[64 * g + 4 * c], &W[(size_t) (16 * x + c) * nb + b].qs[4 * g], 4);
        }
    const int maxr = 9;
    std::vector<block_q8_0> A((size_t) maxr * nb);
    for (auto & b : A) { b.d = f2h((rng() % 1000) / 10000.0f + 0.001f); for (auto & q : b.qs) q = (int8_t) ((int) (rng() % 255) - 127); }
    // reference: same float steps, scalar
    std::vector<float> ref((size_t) maxr * nc);
    for (int r = 0; r < maxr; ++r)
        for (int c = 0; c < nc; ++c) {
            float acc = 0;
            for (int b = 0; b < nb; ++b) {
                const block_q4_0 & wb = W[(size_t) c * nb + b];
                const block_q8_0 & ab = A[(size_t) r * nb + b];
                int32_t t = 0;
                for (int j = 0; j < 16; ++j) t += ((wb.qs[j] & 15) - 8) * ab.qs[j] + ((wb.qs[j] >> 4) - 8) * ab.qs[j + 16];
                acc = fmaf((float) t, h2f(wb.d) * h2f(ab.d), acc);
            }
            ref[(size_t) r * nc + c] = acc;
        }
    std::vector<float> out((size_t) maxr * nc);
    for (int nr = 1; nr <= maxr; ++nr) {
        std::fill(out.begin(), out.end(), NAN);
        specdecode_rows::gemm(n, out.data(), nc, R.data(), A.data(), nr, nc);
        for (size_t i = 0; i < (size_t) nr * nc; ++i)
            if (memcmp(&out[i], &ref[i], 4) != 0) { printf("MISMATCH nr=%d i=%zu %g %g\n", nr, i, out[i], ref[i]); return 1; }
    }
    printf("bit-exact for 1..%d rows\n", maxr);
#ifdef STOCK
    std::vector<block_q4_0x8> R8((size_t) nc / 8 * nb);
    for (int x = 0; x < nc / 8; ++x)
        for (int b = 0; b < nb; ++b) {
            block_q4_0x8 & o = R8[(size_t) x * nb + b];
            block_q4_0 in[8];
            for (int c = 0; c < 8; ++c) in[c] = W[(size_t) (8 * x + c) * nb + b];
            for (int c = 0; c < 8; ++c) o.d[c] = in[c].d;
            for (int i = 0; i < 16; ++i) { uint64_t e; memcpy(&e, &in[i % 8].qs[(i / 8) * 8], 8); e ^= 0x8888888888888888ULL; memcpy(&o.qs[i * 8], &e, 8); }
        }
    {
        ggml_cpu_init();
        std::vector<float> st(nc);
        ggml_gemv_q4_0_8x8_q8_0(n, st.data(), nc, R8.data(), A.data(), 1, nc);
        int bad = 0; double mx = 0; for (int c = 0; c < nc; ++c) { bad += memcmp(&st[c], &ref[c], 4) != 0; mx = std::max(mx, (double) fabsf(st[c] - ref[c]) / (fabsf(ref[c]) + 1e-3)); }
        printf("max rel diff %g; st[0..2] %g %g %g ref %g %g %g\n", mx, st[0], st[1], st[2], ref[0], ref[1], ref[2]);
        printf("stock gemv vs reference: %d of %d differ\n", bad, nc);
        double best = 1e9;
        for (int it = 0; it < 30; ++it) {
            auto t0 = std::chrono::steady_clock::now();
            ggml_gemv_q4_0_8x8_q8_0(n, st.data(), nc, R8.data(), A.data(), 1, nc);
            best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        printf("stock gemv one row: %.3f ms\n", best);
    }
#endif
    double one = 0;
    for (int nr = 1; nr <= 8; ++nr) {
        double best = 1e9;
        for (int it = 0; it < 30; ++it) {
            auto t0 = std::chrono::steady_clock::now();
            specdecode_rows::gemm(n, out.data(), nc, R.data(), A.data(), nr, nc);
            best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        if (nr == 1) one = best;
        printf("rows %d: %.3f ms (%.2fx one row)\n", nr, best, best / one);
    }
}
