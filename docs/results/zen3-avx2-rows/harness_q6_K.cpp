// Standalone check and timing of AVX2 Q6_K x16 rows kernels: the AVX-512 build's nibble layout ported to
// AVX2 and the byte layout the patch ships for AVX2 (gemm<specdecode_q6_Kx16u8>), against llama.cpp's one-row dot product.
#include <immintrin.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <chrono>
#include <cmath>
#include <random>
#include <algorithm>

#define QK_K 256
typedef uint16_t ggml_half;
struct block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; };
struct block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
struct specdecode_q6_Kx16 { ggml_half d[16]; int8_t scales[256]; uint8_t ql[32 * 64]; uint8_t qh[16 * 64]; };
struct specdecode_q6_Kx16u8 { ggml_half d[16]; int8_t scales[256]; uint8_t q[64 * 64]; };
static inline float h2f(ggml_half h) { return _cvtsh_ss(h); }
static inline ggml_half f2h(float f) { return _cvtss_sh(f, 0); }

static void q6_K_unpack(const block_q6_K & x, uint8_t * q) {
    for (int half = 0; half < 2; ++half) {
        const uint8_t * ql = x.ql + 64 * half;
        const uint8_t * qh = x.qh + 32 * half;
        uint8_t * y = q + 128 * half;
        for (int l = 0; l < 32; ++l) {
            y[l + 0] = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
            y[l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
            y[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            y[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
}
static void q6_K_make_x16(const block_q6_K * in, specdecode_q6_Kx16 & out) {
    uint8_t q[16][256];
    for (int c = 0; c < 16; ++c) {
        q6_K_unpack(in[c], q[c]);
        out.d[c] = in[c].d;
        for (int j = 0; j < 16; ++j) out.scales[16 * j + c] = in[c].scales[j];
    }
    for (int g = 0; g < 32; ++g)
        for (int c = 0; c < 16; ++c)
            for (int i = 0; i < 4; ++i)
                out.ql[64 * g + 4 * c + i] = (q[c][4 * g + i] & 0xF) | ((q[c][128 + 4 * g + i] & 0xF) << 4);
    for (int h = 0; h < 16; ++h)
        for (int c = 0; c < 16; ++c)
            for (int i = 0; i < 4; ++i) {
                uint8_t v = 0;
                for (int t = 0; t < 4; ++t) v |= (q[c][64 * t + 4 * h + i] >> 4) << (2 * t);
                out.qh[64 * h + 4 * c + i] = v;
            }
}

static void q6_K_make_x16u8(const block_q6_K * in, specdecode_q6_Kx16u8 & out) {
    uint8_t q[16][256];
    for (int c = 0; c < 16; ++c) {
        q6_K_unpack(in[c], q[c]);
        out.d[c] = in[c].d;
        for (int j = 0; j < 16; ++j) out.scales[16 * j + c] = in[c].scales[j];
    }
    for (int g = 0; g < 64; ++g)
        for (int c = 0; c < 16; ++c)
            for (int i = 0; i < 4; ++i) out.q[64 * g + 4 * c + i] = q[c][4 * g + i];
}

template <int ROWS>
static inline void q6_Kx16_rows(int nb, const specdecode_q6_Kx16u8 * w, const block_q8_K * a, float * s, size_t bs) {
    for (int h = 0; h < 2; ++h) {
        __m256 acc[ROWS];
        for (int r = 0; r < ROWS; ++r) acc[r] = _mm256_setzero_ps();
        for (int b = 0; b < nb; ++b) {
            const specdecode_q6_Kx16u8 & wb = w[b];
            __m256i isum[ROWS];
            for (int r = 0; r < ROWS; ++r) {
                const int32_t * bs2 = (const int32_t *) a[r * nb + b].bsums;
                const __m128i s0 = _mm_loadl_epi64((const __m128i *) (wb.scales + 8 * h));
                const __m128i s1 = _mm_loadl_epi64((const __m128i *) (wb.scales + 16 + 8 * h));
                __m256i c = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s1)), _mm256_set1_epi32(bs2[0]));
                for (int j = 2; j < 16; j += 2) {
                    const __m128i t0 = _mm_loadl_epi64((const __m128i *) (wb.scales + 16 * j + 8 * h));
                    const __m128i t1 = _mm_loadl_epi64((const __m128i *) (wb.scales + 16 * (j + 1) + 8 * h));
                    c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(t0, t1)), _mm256_set1_epi32(bs2[j / 2])));
                }
                isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(c, 5));
            }
            for (int j = 0; j < 16; ++j) {
                const __m256i s = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *) (wb.scales + 16 * j + 8 * h)));
                const __m256i scale = _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s, 16));
                const __m256i w0 = _mm256_loadu_si256((const __m256i *) (wb.q + 64 * (4 * j + 0) + 32 * h));
                const __m256i w1 = _mm256_loadu_si256((const __m256i *) (wb.q + 64 * (4 * j + 1) + 32 * h));
                const __m256i w2 = _mm256_loadu_si256((const __m256i *) (wb.q + 64 * (4 * j + 2) + 32 * h));
                const __m256i w3 = _mm256_loadu_si256((const __m256i *) (wb.q + 64 * (4 * j + 3) + 32 * h));
                for (int r = 0; r < ROWS; ++r) {
                    const int32_t * q = (const int32_t *) (a[r * nb + b].qs + 16 * j);
                    const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, _mm256_set1_epi32(q[0])),
                                                         _mm256_maddubs_epi16(w1, _mm256_set1_epi32(q[1])));
                    const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(w2, _mm256_set1_epi32(q[2])),
                                                         _mm256_maddubs_epi16(w3, _mm256_set1_epi32(q[3])));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_madd_epi16(p01, scale), _mm256_madd_epi16(p23, scale)));
                }
            }
            const __m256 dcol = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (wb.d + 8 * h)));
            for (int r = 0; r < ROWS; ++r)
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(dcol, _mm256_set1_ps(a[r * nb + b].d)), acc[r]);
        }
        for (int r = 0; r < ROWS; ++r) _mm256_storeu_ps(s + r * bs + 8 * h, acc[r]);
    }
}

// Weights 4 g .. 4 g + 3 of eight columns (8 h .. 8 h + 7), one column a 32-bit lane, as 0..63; T = g / 16.
template <int T>
static inline __m256i q6_K_weights8(const specdecode_q6_Kx16 & w, int g, int h) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i high2 = _mm256_set1_epi8(0x30);
    const __m256i l = _mm256_loadu_si256((const __m256i *) (w.ql + 64 * (g & 31) + 32 * h));
    const __m256i x = _mm256_loadu_si256((const __m256i *) (w.qh + 64 * (g & 15) + 32 * h));
    const __m256i lo = T < 2 ? _mm256_and_si256(l, low4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
    const __m256i hi = T == 0 ? _mm256_slli_epi16(x, 4) : T == 1 ? _mm256_slli_epi16(x, 2) : T == 2 ? x : _mm256_srli_epi16(x, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hi, high2));
}

// Column c's scales of groups j and j + 1 as the two 16-bit halves of lane c (eight columns from 8 h).
static inline __m256i q6_K_scale_pairs(const specdecode_q6_Kx16 & w, int j, int h) {
    const __m128i a = _mm_loadl_epi64((const __m128i *) (w.scales + 16 * j + 8 * h));
    const __m128i b = _mm_loadl_epi64((const __m128i *) (w.scales + 16 * (j + 1) + 8 * h));
    return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
}

// Each scale as both 16-bit halves of its column's lane.
static inline __m256i q6_K_scale_twice(const specdecode_q6_Kx16 & w, int j, int h) {
    const __m256i s = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *) (w.scales + 16 * j + 8 * h)));
    return _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s, 16));
}

template <int ROWS, int T>
static inline void q6_K_quarter(const specdecode_q6_Kx16 & w, const block_q8_K * a, int nb, int h, __m256i * isum) {
    for (int jj = 0; jj < 4; ++jj) {
        const int j = 4 * T + jj;
        const __m256i w0 = q6_K_weights8<T>(w, 4 * j + 0, h);
        const __m256i w1 = q6_K_weights8<T>(w, 4 * j + 1, h);
        const __m256i w2 = q6_K_weights8<T>(w, 4 * j + 2, h);
        const __m256i w3 = q6_K_weights8<T>(w, 4 * j + 3, h);
        const __m256i scale = q6_K_scale_twice(w, j, h);
        for (int r = 0; r < ROWS; ++r) {
            const int32_t * q = (const int32_t *) (a[r * nb].qs + 16 * j);
            // Four products of at most 63 x 128 each stay below 2^15.
            const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, _mm256_set1_epi32(q[0])),
                                                 _mm256_maddubs_epi16(w1, _mm256_set1_epi32(q[1])));
            const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(w2, _mm256_set1_epi32(q[2])),
                                                 _mm256_maddubs_epi16(w3, _mm256_set1_epi32(q[3])));
            isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_madd_epi16(p01, scale), _mm256_madd_epi16(p23, scale)));
        }
    }
}

template <int ROWS>
static inline void q6_Kx16_rows(int nb, const specdecode_q6_Kx16 * w, const block_q8_K * a, float * s, size_t bs) {
    for (int h = 0; h < 2; ++h) {
        __m256 acc[ROWS];
        for (int r = 0; r < ROWS; ++r) acc[r] = _mm256_setzero_ps();
        for (int b = 0; b < nb; ++b) {
            __m256i isum[ROWS];
            // The weights are stored plus 32: 32 x sum_j scale_j x (the row's sum over group j) comes off.
            for (int r = 0; r < ROWS; ++r) {
                const int32_t * bs2 = (const int32_t *) a[r * nb + b].bsums;
                __m256i c = _mm256_madd_epi16(q6_K_scale_pairs(w[b], 0, h), _mm256_set1_epi32(bs2[0]));
                for (int j = 2; j < 16; j += 2)
                    c = _mm256_add_epi32(c, _mm256_madd_epi16(q6_K_scale_pairs(w[b], j, h), _mm256_set1_epi32(bs2[j / 2])));
                isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(c, 5));
            }
            q6_K_quarter<ROWS, 0>(w[b], a + b, nb, h, isum);
            q6_K_quarter<ROWS, 1>(w[b], a + b, nb, h, isum);
            q6_K_quarter<ROWS, 2>(w[b], a + b, nb, h, isum);
            q6_K_quarter<ROWS, 3>(w[b], a + b, nb, h, isum);
            const __m256 dcol = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (w[b].d + 8 * h)));
            for (int r = 0; r < ROWS; ++r)
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(dcol, _mm256_set1_ps(a[r * nb + b].d)), acc[r]);
        }
        for (int r = 0; r < ROWS; ++r) _mm256_storeu_ps(s + r * bs + 8 * h, acc[r]);
    }
}

// Either layout: W picks the q6_Kx16_rows overload.
template <typename W>
static void gemm(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc) {
    const int nb = n / QK_K;
    const W * w = (const W *) vx;
    const block_q8_K * a = (const block_q8_K *) vy;
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const block_q8_K * ar = a + (size_t) r0 * nb;
        for (int x = 0; x < nc; x += 16) {
            const W * wx = w + (size_t) (x / 16) * nb;
            float * out = s + (size_t) r0 * bs + x;
            switch (nr - r0 < 8 ? nr - r0 : 8) {
                case 1: q6_Kx16_rows<1>(nb, wx, ar, out, bs); break;
                case 2: q6_Kx16_rows<2>(nb, wx, ar, out, bs); break;
                case 3: q6_Kx16_rows<3>(nb, wx, ar, out, bs); break;
                case 4: q6_Kx16_rows<4>(nb, wx, ar, out, bs); break;
                case 5: q6_Kx16_rows<5>(nb, wx, ar, out, bs); break;
                case 6: q6_Kx16_rows<6>(nb, wx, ar, out, bs); break;
                case 7: q6_Kx16_rows<7>(nb, wx, ar, out, bs); break;
                default: q6_Kx16_rows<8>(nb, wx, ar, out, bs); break;
            }
        }
    }
}

extern "C" void ggml_cpu_init(void);
extern "C" void ggml_vec_dot_q6_K_q8_K(int n, float * s, size_t bs, const void * vx, size_t bx, const void * vy, size_t by, int nrc);

int main(int argc, char ** argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 1536, nc = argc > 2 ? atoi(argv[2]) : 151936;
    const int nb = n / QK_K;
    ggml_cpu_init();
    std::mt19937 rng(1);
    std::vector<block_q6_K> W((size_t) nc * nb);
    for (auto & b : W) {
        b.d = f2h((rng() % 1000) / 300000.0f + 0.0001f);
        for (auto & q : b.ql) q = rng() & 0xFF;
        for (auto & q : b.qh) q = rng() & 0xFF;
        for (auto & q : b.scales) q = (int8_t) ((int) (rng() % 255) - 127);
    }
    std::vector<specdecode_q6_Kx16> R((size_t) nc / 16 * nb);
    for (int x = 0; x < nc / 16; ++x)
        for (int b = 0; b < nb; ++b) {
            block_q6_K cols[16];
            for (int c = 0; c < 16; ++c) cols[c] = W[(size_t) (16 * x + c) * nb + b];
            q6_K_make_x16(cols, R[(size_t) x * nb + b]);
        }
    const int maxr = 9;
    std::vector<block_q8_K> A((size_t) maxr * nb);
    for (auto & b : A) {
        b.d = (rng() % 1000) / 10000.0f + 0.001f;
        for (auto & q : b.qs) q = (int8_t) ((int) (rng() % 255) - 127);
        for (int j = 0; j < 16; ++j) { int t = 0; for (int i = 0; i < 16; ++i) t += b.qs[16 * j + i]; b.bsums[j] = t; }
    }
    // reference with the same float steps
    std::vector<float> ref((size_t) maxr * nc);
    for (int r = 0; r < maxr; ++r)
        for (int c = 0; c < nc; ++c) {
            float acc = 0;
            for (int b = 0; b < nb; ++b) {
                uint8_t q[256];
                q6_K_unpack(W[(size_t) c * nb + b], q);
                const block_q8_K & y = A[(size_t) r * nb + b];
                int32_t t = 0;
                for (int j = 0; j < 16; ++j) {
                    int32_t g = 0;
                    for (int i = 0; i < 16; ++i) g += (q[16 * j + i] - 32) * y.qs[16 * j + i];
                    t += g * W[(size_t) c * nb + b].scales[j];
                }
                acc = fmaf((float) t, h2f(W[(size_t) c * nb + b].d) * y.d, acc);
            }
            ref[(size_t) r * nc + c] = acc;
        }
    std::vector<float> out((size_t) maxr * nc);
    for (int nr = 1; nr <= maxr; ++nr) {
        std::fill(out.begin(), out.end(), NAN);
        gemm<specdecode_q6_Kx16>(n, out.data(), nc, R.data(), A.data(), nr, nc);
        for (size_t i = 0; i < (size_t) nr * nc; ++i)
            if (memcmp(&out[i], &ref[i], 4) != 0) { printf("MISMATCH nr=%d i=%zu %g %g\n", nr, i, out[i], ref[i]); return 1; }
    }
    printf("bit-exact against the reference for 1..%d rows\n", maxr);
    std::vector<specdecode_q6_Kx16u8> U((size_t) nc / 16 * nb);
    for (int x = 0; x < nc / 16; ++x)
        for (int b = 0; b < nb; ++b) {
            block_q6_K cols[16];
            for (int c = 0; c < 16; ++c) cols[c] = W[(size_t) (16 * x + c) * nb + b];
            q6_K_make_x16u8(cols, U[(size_t) x * nb + b]);
        }
    for (int nr = 1; nr <= maxr; ++nr) {
        std::fill(out.begin(), out.end(), NAN);
        gemm<specdecode_q6_Kx16u8>(n, out.data(), nc, U.data(), A.data(), nr, nc);
        for (size_t i = 0; i < (size_t) nr * nc; ++i)
            if (memcmp(&out[i], &ref[i], 4) != 0) { printf("U8 MISMATCH nr=%d i=%zu %g %g\n", nr, i, out[i], ref[i]); return 1; }
    }
    printf("u8 layout bit-exact for 1..%d rows\n", maxr);
    for (int nr = 1; nr <= 8; ++nr) {
        double b2 = 1e9;
        for (int it = 0; it < 20; ++it) {
            auto t0 = std::chrono::steady_clock::now();
            gemm<specdecode_q6_Kx16u8>(n, out.data(), nc, U.data(), A.data(), nr, nc);
            b2 = std::min(b2, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        printf("u8 rows %d: %.3f ms\n", nr, b2);
    }
    std::vector<float> st(nc);
    double mx = 0;
    for (int c = 0; c < nc; ++c) {
        ggml_vec_dot_q6_K_q8_K(n, &st[c], 0, &W[(size_t) c * nb], 0, A.data(), 0, 1);
        mx = std::max(mx, (double) fabsf(st[c] - ref[c]) / (fabsf(ref[c]) + 1e-3f));
    }
    printf("stock vec_dot vs reference: max rel diff %g\n", mx);
    double best = 1e9;
    for (int it = 0; it < 20; ++it) {
        auto t0 = std::chrono::steady_clock::now();
        for (int c = 0; c < nc; ++c) ggml_vec_dot_q6_K_q8_K(n, &st[c], 0, &W[(size_t) c * nb], 0, A.data(), 0, 1);
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    printf("stock one row: %.3f ms\n", best);
    for (int nr = 1; nr <= 8; ++nr) {
        double b2 = 1e9;
        for (int it = 0; it < 20; ++it) {
            auto t0 = std::chrono::steady_clock::now();
            gemm<specdecode_q6_Kx16>(n, out.data(), nc, R.data(), A.data(), nr, nc);
            b2 = std::min(b2, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        printf("rows %d: %.3f ms\n", nr, b2);
    }
}
