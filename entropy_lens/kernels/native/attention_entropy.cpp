// The attention output and the streaming state of its row statistics from the same score tiles, on
// CPU: the loop of PyTorch's CPU flash attention (per batch, query head and query block: a BLAS GEMM
// for the scores, one vectorised pass for max / exp / row sums, a GEMM for e·V, at::parallel_for over
// the blocks) with the entropy's centred sum u accumulated beside the running max m and the sum l, and
// the further accumulators of kernels/stats.py's EXTRA_STATE (w, c, lk, d, f, mk, rk) only
// where asked for.
// The kernel returns the final state; Python reads the statistics off it (stats.read_stats).
//
// Math (per query row, scores s_j over the attendable keys; see kernels/torch_chunked.py):
//   m = max_j s_j,  l = Σ_j e^(s_j − m),  u = Σ_j e^(s_j − m)(s_j − m),  H = log l − u/l (nats)
// When a key block raises the max from m to m', with α = e^(m − m'):
//   l ← α l + Σ_blk e^(s − m'),  u ← α (u + (m − m') l) + Σ_blk e^(s − m')(s − m'),  o ← α o + e·V
// Before any key m = −inf, l = u = 0 (the (m − m') l term is skipped then: −inf · 0). A sink σ_h is
// the state before any key: m = σ_h, l = 1, u = 0 (and c = 1). out = o / l (0 for a row with l = 0).
// Extras, with e = e^(s − m'), b_j = pos_i − j how far key j lies behind the row, δ = m − m':
//   w ← α (w + 2δu + δ² l) + Σ e (s − m')²,  c ← α² c + Σ e²,  lk ← α lk + Σ e,
//   d ← α d + Σ e b_j (from the row: exact integers in fp32 up to 2^24 tokens),  f ← α f + Σ_{j < K} e,
//   mk ← max(mk, max_blk s): the largest score over the keys (−inf before any; the sink is no key),
//   rk ← α rk + Σ_{0 <= b_j < W} e: the row's last W = recent_keys keys, pos − W < j <= pos
// Key ranges (`spans`, a session's span masses): sp_x ← α sp_x + Σ_{lo_x <= j < hi_x} e, one plane each,
// the range [lo_x, hi_x) per batch row, the same for all its rows (e = 0 on a key a row may not see)
// Scores: s = λ_h q·k, then c·tanh(s/c) (softcap), then − slope_h·|i + offset − j| (ALiBi) and
// + key_bias[b, h, j], then −inf where the row may not attend (causal, window, 4-D mask): `Mods`, one
// place for both the row pass (`forward`) and the column pass (`received`).
// Everything is fp32: inputs are converted by the Python wrapper (entropy_lens/kernels/native).
// Threads: at::parallel_for runs on torch's intra-op pool (torch.set_num_threads, --threads); the
// GEMMs are MKL's sgemm_ (exported by libtorch_cpu), sequential inside the parallel region as in
// PyTorch's own kernel.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define EL_AVX2 1
#endif

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

// MKL's per-thread thread count, its C entry point (mkl_service.h defines mkl_set_num_threads_local as
// MKL_Set_Num_Threads_Local; the lower-case symbol is the Fortran one, which takes a pointer), exported
// by libtorch_cpu where torch is built with MKL; weak, so a build without it still loads. Without it MKL's GEMMs called from inside at::parallel_for start
// their own thread teams: on 2 cores, a thousand times slower. Each parallel chunk sets 1 for its
// thread and restores the previous value, as a sequential BLAS per block is what the loop wants.
extern "C" int MKL_Set_Num_Threads_Local(int) __attribute__((weak));

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLnFltMin = -87.33654475f;  // e^x is 0 below (and for x = −inf)

// C (column-major m × n, ldc) = alpha op(A) op(B) + beta C: Fortran BLAS
inline void gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  int ldai = static_cast<int>(lda), ldbi = static_cast<int>(ldb), ldci = static_cast<int>(ldc);
  sgemm_(&ta, &tb, &mi, &ni, &ki, &alpha, a, &ldai, b, &ldbi, &beta, c, &ldci);
}

using Clock = std::chrono::steady_clock;
inline double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline float exp_scalar(float x) { return x < kLnFltMin ? 0.0f : std::exp(x); }

#ifdef EL_AVX2
// Cephes' expf (about 1 ulp) on 8 lanes; x < ln(FLT_MIN), −inf included, gives 0.
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(kLnFltMin);
  const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3762626647949f));
  __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, z, x), _mm256_set1_ps(1.0f));
  __m256i n = _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127));
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(n, 23)));
  return _mm256_andnot_ps(tiny, y);
}

// Cephes' tanhf on 8 lanes (within 1.3 ulp of tanh over ±60): x + x³·P(x²) for |x| ≤ 0.625, else 1 − 2/(e^(2|x|) + 1)
// (exp8 saturates at e^88: ±1 for |x| ≥ 44), the sign put back.
inline __m256 tanh8(__m256 x) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  const __m256 ax = _mm256_andnot_ps(sign_bit, x);
  const __m256 e = exp8(_mm256_add_ps(ax, ax));
  const __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  const __m256 z = _mm256_mul_ps(ax, ax);
  __m256 p = _mm256_set1_ps(-5.70498872745E-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954E-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531E-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036E-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422E-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), ax, ax);
  const __m256 r = _mm256_blendv_ps(small, big, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_GT_OQ));
  return _mm256_or_ps(r, _mm256_and_ps(x, sign_bit));
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

inline float row_max(const float* s, int64_t n) {
  float mx = kNegInf;
  int64_t j = 0;
#ifdef EL_AVX2
  __m256 a = _mm256_set1_ps(kNegInf), b = a;
  for (; j + 16 <= n; j += 16) {
    a = _mm256_max_ps(a, _mm256_loadu_ps(s + j));
    b = _mm256_max_ps(b, _mm256_loadu_ps(s + j + 8));
  }
  mx = hmax8(_mm256_max_ps(a, b));
#endif
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  return mx;
}

// s ← c·tanh(s/c) in place (softcap c)
inline void row_softcap(float* s, int64_t n, float cap) {
  int64_t j = 0;
#ifdef EL_AVX2
  const __m256 vc = _mm256_set1_ps(cap);
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(s + j, _mm256_mul_ps(vc, tanh8(_mm256_div_ps(_mm256_loadu_ps(s + j), vc))));
  }
#endif
  for (; j < n; ++j) s[j] = cap * std::tanh(s[j] / cap);
}

// s ← −inf where the mask row mr says False (bool bytes, 0 or 1), else s unchanged
inline void row_mask(float* s, const bool* mr, int64_t n) {
  int64_t j = 0;
#ifdef EL_AVX2
  const __m256 ninf = _mm256_set1_ps(kNegInf);
  const __m256i zero = _mm256_setzero_si256();
  for (; j + 8 <= n; j += 8) {  // 8 mask bytes widened to 8 lanes; a lane whose byte is 0 takes −inf
    const __m256i keep = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mr + j)));
    const __m256 off = _mm256_castsi256_ps(_mm256_cmpeq_epi32(keep, zero));
    _mm256_storeu_ps(s + j, _mm256_blendv_ps(_mm256_loadu_ps(s + j), ninf, off));
  }
#endif
  for (; j < n; ++j) s[j] = mr[j] ? s[j] : kNegInf;
}

// Σ x_j over j < n, eight lanes at a time (a range of a tile's e: a key range's share)
inline float row_sum(const float* x, int64_t n) {
  float total = 0.0f;
  int64_t j = 0;
#ifdef EL_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; j + 8 <= n; j += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + j));
  total = hsum8(acc);
#endif
  for (; j < n; ++j) total += x[j];
  return total;
}

// s ← e = e^(s − m) in place (the tile e·V takes); sum_e = Σ e, sum_ed = Σ e (s − m). A masked key
// (s = −inf) has e = 0 exactly, and its s − m is clamped at ln(FLT_MIN) in the products so that it adds
// 0 · finite = 0, never 0 · (−inf).
inline void row_exp(float* s, int64_t n, float m, float& sum_e, float& sum_ed) {
  float se = 0.0f, sed = 0.0f;
  int64_t j = 0;
#ifdef EL_AVX2
  const __m256 vm = _mm256_set1_ps(m), lo = _mm256_set1_ps(kLnFltMin);
  __m256 ae = _mm256_setzero_ps(), aed = ae;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + j), vm);
    const __m256 e = exp8(x), d = _mm256_max_ps(x, lo);
    _mm256_storeu_ps(s + j, e);
    ae = _mm256_add_ps(ae, e);
    aed = _mm256_fmadd_ps(e, d, aed);
  }
  se = hsum8(ae);
  sed = hsum8(aed);
#endif
  for (; j < n; ++j) {
    const float x = s[j] - m;
    const float e = exp_scalar(x), d = std::max(x, kLnFltMin);
    s[j] = e;
    se += e;
    sed += e * d;
  }
  sum_e = se;
  sum_ed = sed;
}


// The tile sums the extra accumulators take beside row_exp's (only those of the template flags):
// edd = Σ e (s − m)², ee = Σ e², eb = Σ e (base − j) with base = pos − k0, the key's distance behind
// the row. s ← e in place as row_exp.
struct TileSums {
  float e = 0, ed = 0, edd = 0, ee = 0, eb = 0;
};

template <bool W, bool C, bool D>
inline void row_exp_stats(float* s, int64_t n, float m, float base, TileSums& t) {
  float se = 0, sed = 0, sedd = 0, see = 0, seb = 0;
  int64_t j = 0;
#ifdef EL_AVX2
  const __m256 vm = _mm256_set1_ps(m), lo = _mm256_set1_ps(kLnFltMin), eight = _mm256_set1_ps(8.0f);
  __m256 ae = _mm256_setzero_ps(), aed = ae, aedd = ae, aee = ae, aeb = ae;
  __m256 b = _mm256_setr_ps(base, base - 1, base - 2, base - 3, base - 4, base - 5, base - 6, base - 7);
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + j), vm);
    const __m256 e = exp8(x), d = _mm256_max_ps(x, lo);
    _mm256_storeu_ps(s + j, e);
    ae = _mm256_add_ps(ae, e);
    aed = _mm256_fmadd_ps(e, d, aed);
    if (W) aedd = _mm256_fmadd_ps(_mm256_mul_ps(e, d), d, aedd);
    if (C) aee = _mm256_fmadd_ps(e, e, aee);
    if (D) {
      aeb = _mm256_fmadd_ps(e, b, aeb);
      b = _mm256_sub_ps(b, eight);
    }
  }
  se = hsum8(ae);
  sed = hsum8(aed);
  if (W) sedd = hsum8(aedd);
  if (C) see = hsum8(aee);
  if (D) seb = hsum8(aeb);
#endif
  for (; j < n; ++j) {
    const float x = s[j] - m;
    const float e = exp_scalar(x), d = std::max(x, kLnFltMin);
    s[j] = e;
    se += e;
    sed += e * d;
    if (W) sedd += e * d * d;
    if (C) see += e * e;
    if (D) seb += e * (base - static_cast<float>(j));
  }
  t.e = se;
  t.ed = sed;
  t.edd = sedd;
  t.ee = see;
  t.eb = seb;
}

using RowExpStats = void (*)(float*, int64_t, float, float, TileSums&);

// the instantiation for the accumulators asked for (w: W, c: C, d: D)
inline RowExpStats row_exp_for(bool w, bool c, bool d) {
  static const RowExpStats table[8] = {
      row_exp_stats<false, false, false>, row_exp_stats<false, false, true>,
      row_exp_stats<false, true, false>,  row_exp_stats<false, true, true>,
      row_exp_stats<true, false, false>,  row_exp_stats<true, false, true>,
      row_exp_stats<true, true, false>,   row_exp_stats<true, true, true>};
  return table[(w ? 4 : 0) + (c ? 2 : 0) + (d ? 1 : 0)];
}

// The score modifiers both passes apply to a tile of λ q·k, written once: c·tanh(s/c) (softcap), then
// − slope_h·|pos − j| (ALiBi) and + key_bias[b, h, j], then −inf where the row may not attend: keys after
// its position (causal), at or behind pos − window, and where the 4-D mask says False. Built once per
// call (the tensors' checks and contiguous copies kept here); `head(b, h)` gives the per-(batch, head)
// pointers a task reads, and `keys_for_rows` / `rows_for_keys` the block ranges the masks leave.
struct Mods {
  bool causal;
  int64_t window;  // <= 0: none
  bool has_cap;
  float cap;
  at::Tensor mask_c, alibi_c, kb_c;
  const bool* md = nullptr;
  int64_t msB = 0, msH = 0, msT = 0;  // the mask's strides, 0 along a broadcast dimension
  const float* alid = nullptr;
  const float* kbd = nullptr;
  int64_t kbB = 0, S;

  // `who` names the caller in the check's message ("native attention", "native received")
  Mods(const char* who, bool causal_, const at::Tensor& mask, int64_t window_, double softcap,
       const at::Tensor& alibi, const at::Tensor& key_bias, int64_t Hq, int64_t S_)
      : causal(causal_), window(window_), has_cap(softcap > 0), cap(static_cast<float>(softcap)), S(S_) {
    if (mask.defined() && mask.numel() > 0) {
      TORCH_CHECK(mask.dim() == 4 && mask.scalar_type() == at::kBool && mask.size(3) == S, who,
                  ": mask must be bool (B|1, Hq|1, T|1, S)");
      mask_c = mask.contiguous();
      msB = mask_c.size(0) > 1 ? mask_c.stride(0) : 0;
      msH = mask_c.size(1) > 1 ? mask_c.stride(1) : 0;
      msT = mask_c.size(2) > 1 ? mask_c.stride(2) : 0;
      md = mask_c.data_ptr<bool>();
    }
    if (alibi.defined() && alibi.numel() > 0) {
      alibi_c = alibi.contiguous();
      alid = alibi_c.data_ptr<float>();
    }
    if (key_bias.defined() && key_bias.numel() > 0) {
      kb_c = key_bias.contiguous();
      kbB = kb_c.size(0) > 1 ? Hq * S : 0;
      kbd = kb_c.data_ptr<float>();
    }
  }

  // what one (batch, query head) reads: its ALiBi slope, key-bias row and mask plane (row 0)
  struct Head {
    float slope;
    const float* kb;    // (S,) or nullptr
    const bool* mask;   // (T|1, S) with row stride msT, or nullptr
  };
  Head head(int64_t b, int64_t h) const {
    return {alid != nullptr ? alid[h] : 0.0f, kbd != nullptr ? kbd + b * kbB + h * S : nullptr,
            md != nullptr ? md + b * msB + h * msH : nullptr};
  }

  // keys [start, end) the rows q0..q1 may see: causal up to the last row's position; the window from the
  // first row's (row i sits at key position i + offset)
  std::pair<int64_t, int64_t> keys_for_rows(int64_t q0, int64_t q1, int64_t offset) const {
    const int64_t end = causal ? std::min(S, q1 + offset) : S;
    const int64_t start = window > 0 ? std::max<int64_t>(0, q0 + offset - window + 1) : 0;
    return {start, end};
  }

  // rows [start, end) that may see a key of k0..k1
  std::pair<int64_t, int64_t> rows_for_keys(int64_t k0, int64_t k1, int64_t T, int64_t offset) const {
    const int64_t start = causal ? std::max<int64_t>(0, k0 - offset) : 0;
    const int64_t end = window > 0 ? std::min<int64_t>(T, window + k1 - 1 - offset) : T;
    return {start, end};
  }

  // s (n,): the scores of query row `row` (at key position pos) against keys k0..k0 + n, modified in place
  inline void apply(const Head& hd, float* s, int64_t n, int64_t row, int64_t pos, int64_t k0) const {
    if (has_cap) row_softcap(s, n, cap);
    if (alid != nullptr) {
      const float slope = hd.slope;
      for (int64_t j = 0; j < n; ++j) s[j] -= slope * std::fabs(static_cast<float>(pos - (k0 + j)));
    }
    if (hd.kb != nullptr) {
      const float* kb = hd.kb + k0;
      for (int64_t j = 0; j < n; ++j) s[j] += kb[j];
    }
    if (causal) {  // keys after the row's position
      for (int64_t j = std::max<int64_t>(0, pos + 1 - k0); j < n; ++j) s[j] = kNegInf;
    }
    if (window > 0) {  // keys at or behind pos − window
      const int64_t stop = std::min<int64_t>(n, pos - window + 1 - k0);
      for (int64_t j = 0; j < stop; ++j) s[j] = kNegInf;
    }
    if (hd.mask != nullptr) row_mask(s, hd.mask + row * msT + k0, n);
  }
};

// count_j += 1 where s_j > −inf: the keys a counted row may attend (the column state's count)
inline void count_seen(const float* s, int64_t n, float* count) {
  int64_t j = 0;
#ifdef EL_AVX2
  const __m256 ninf = _mm256_set1_ps(kNegInf), one = _mm256_set1_ps(1.0f);
  for (; j + 8 <= n; j += 8) {
    const __m256 seen = _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(s + j), ninf, _CMP_GT_OQ), one);
    _mm256_storeu_ps(count + j, _mm256_add_ps(_mm256_loadu_ps(count + j), seen));
  }
#endif
  for (; j < n; ++j) count[j] += s[j] > kNegInf ? 1.0f : 0.0f;
}

// sum_j += f e_j, max_j = max(max_j, f e_j): one row's probabilities p = f · e of a tile into its keys
inline void add_received(const float* e, int64_t n, float f, float* sum, float* mx) {
  int64_t j = 0;
#ifdef EL_AVX2
  const __m256 vf = _mm256_set1_ps(f);
  for (; j + 8 <= n; j += 8) {
    const __m256 p = _mm256_mul_ps(vf, _mm256_loadu_ps(e + j));
    _mm256_storeu_ps(sum + j, _mm256_add_ps(_mm256_loadu_ps(sum + j), p));
    _mm256_storeu_ps(mx + j, _mm256_max_ps(_mm256_loadu_ps(mx + j), p));
  }
#endif
  for (; j < n; ++j) {
    const float p = f * e[j];
    sum[j] += p;
    mx[j] = std::max(mx[j], p);
  }
}

}  // namespace

// The row pass, its arguments the fields of one record (ForwardArgs, below):
// q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv) or an empty tensor (entropy only), float32 with
// unit stride in the last dimension; scale (Hq,); mask bool (Mb, Mh, Mt, S) with Mb ∈ {1, B},
// Mh ∈ {1, Hq}, Mt ∈ {1, T}, or an empty tensor; window ≤ 0: none; softcap ≤ 0: none; sinks, alibi
// (Hq,) or empty; key_bias (Kb, Hq, S) or empty; query row i sits at key position i + offset;
// `extra`: the accumulators to keep, bits 1 w, 2 c, 4 lk, 8 d, 16 f, 32 mk, 64 rk (EXTRA_STATE's order);
// first_keys: f's K; first_key (Fb,) int64 with Fb ∈ {1, B}, or empty (0): each batch row's first real
// key r, so f sums the keys r <= j < r + K; recent_keys: rk's W, the keys pos − W < j <= pos;
// spans (Sb, n, 2) int64 with Sb ∈ {1, B}, or empty: n key ranges [lo, hi) per batch row, each summed
// into a plane of the state after the extras (sp).
// key_state: the column state of attention received (`received` below: per key the sum, the largest
// and the count of its p_ij over the counted rows) from the same tiles, in one pass: each tile's e keeps
// its place in a buffer of the query block's rows × keys (O(block_q · S) per thread, never T × S) with
// the running max m_t it was taken at, and once the block's rows are final, p = e · e^(m_t − m) / l
// is summed into the keys. counted (Cb, T) bool with Cb ∈ {1, B}, or empty (every row): the rows that
// count (a padded row gives nothing); count_j counts the counted rows whose score of key j is > −inf.
// -> {out (B, T, Hq, Dv) float32 (empty without v), the final state (3 + extras + n, B, Hq, T): m, l, u,
// the extras asked for in that order and the n key ranges' sums, with `profile` a (3,) float64 tensor: thread-seconds in
// the score GEMMs, the row passes and the e·V GEMMs (else empty), and with key_state the column state
// (3, B, Hq, S) float32: sum, max, count (else empty)}.
// The row pass's arguments as one record, the fields above (kernels/native/__init__.py's `ForwardArgs`
// fills it by name: bound as `ForwardArgs` below); a tensor left undefined or empty is "none".
struct ForwardArgs {
  at::Tensor q, k, v, scale, mask, sinks, alibi, key_bias, first_key, counted, spans;
  bool causal = true;
  int64_t window = 0;
  double softcap = 0.0;
  int64_t offset = 0, extra = 0, first_keys = 0, recent_keys = 0, block_q = 32, block_k = 1024;
  bool profile = false, key_state = false;
};

std::vector<at::Tensor> forward(const ForwardArgs& args) {
  const at::Tensor &q = args.q, &k = args.k, &v = args.v, &scale = args.scale, &mask = args.mask;
  const at::Tensor &sinks = args.sinks, &alibi = args.alibi, &key_bias = args.key_bias;
  const at::Tensor &first_key = args.first_key, &counted = args.counted;
  const bool causal = args.causal, profile = args.profile, key_state = args.key_state;
  const int64_t window = args.window, offset = args.offset, extra = args.extra, first_keys = args.first_keys;
  const int64_t recent_keys = args.recent_keys, block_q = args.block_q, block_k = args.block_k;
  const double softcap = args.softcap;
  const bool with_output = v.defined() && v.numel() > 0;
  for (const at::Tensor* t : {&q, &k}) {
    TORCH_CHECK(t->dim() == 4 && t->scalar_type() == at::kFloat && t->stride(3) == 1,
                "native attention: q, k, v must be 4-D float32 with unit last stride");
  }
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2);
  TORCH_CHECK(k.size(0) == B && k.size(3) == D && Hkv > 0 && Hq % Hkv == 0, "native attention: q/k shapes");
  TORCH_CHECK(q.stride(2) >= D && k.stride(2) >= D, "native attention: rows of q, k must not overlap");
  const int64_t G = Hq / Hkv;
  const int64_t Dv = with_output ? v.size(3) : 0;
  if (with_output) {
    TORCH_CHECK(v.dim() == 4 && v.scalar_type() == at::kFloat && v.stride(3) == 1 && v.size(0) == B &&
                    v.size(1) == Hkv && v.size(2) == S && v.stride(2) >= Dv,
                "native attention: v must be (B, Hkv, S, Dv) float32 with unit last stride");
  }
  TORCH_CHECK(block_q >= 1 && block_k >= 1, "native attention: block sizes must be >= 1");
  const bool has_sinks = sinks.defined() && sinks.numel() > 0;

  auto opts = q.options().dtype(at::kFloat);
  at::Tensor out = with_output ? at::empty({B, T, Hq, Dv}, opts) : at::empty({0}, opts);
  const bool want_w = extra & 1, want_c = extra & 2, want_lk = extra & 4, want_d = extra & 8, want_f = extra & 16;
  const bool want_mk = extra & 32, want_rk = extra & 64;
  const bool any_extra = extra & (31 | 64);  // the extras the exponentials feed (mk reads the scores alone)
  // where each extra lives in the state: after m, l, u, in EXTRA_STATE's order, only those asked for
  const int64_t iw = 3, ic = iw + want_w, ilk = ic + want_c, id = ilk + want_lk, iff = id + want_d;
  const int64_t imk = iff + want_f;
  const int64_t irk = imk + want_mk;
  at::Tensor spans_c;  // the key ranges, (Sb, n, 2), and their planes after the extras
  const bool has_spans = args.spans.defined() && args.spans.numel() > 0;
  if (has_spans) {
    TORCH_CHECK(args.spans.dim() == 3 && args.spans.scalar_type() == at::kLong && args.spans.size(2) == 2 &&
                    (args.spans.size(0) == 1 || args.spans.size(0) == B),
                "native attention: spans must be int64 (B|1, n, 2)");
    spans_c = args.spans.contiguous();
  }
  const int64_t n_spans = has_spans ? spans_c.size(1) : 0;
  const int64_t spansB = has_spans && spans_c.size(0) > 1 ? 2 * n_spans : 0;  // a batch row's stride
  const int64_t* spand = has_spans ? spans_c.data_ptr<int64_t>() : nullptr;
  const int64_t isp = irk + want_rk;
  const int64_t n_state = isp + n_spans;
  at::Tensor state = at::empty({n_state, B, Hq, T}, opts);
  const RowExpStats row_exp_extra = row_exp_for(want_w, want_c, want_d);

  const Mods mods("native attention", causal, mask, window, softcap, alibi, key_bias, Hq, S);
  at::Tensor scale_c = scale.contiguous(), sinks_c;
  if (has_sinks) sinks_c = sinks.contiguous();
  at::Tensor first_c;
  const bool has_first = first_key.defined() && first_key.numel() > 0;
  if (has_first) {
    TORCH_CHECK(first_key.dim() == 1 && first_key.scalar_type() == at::kLong &&
                    (first_key.size(0) == 1 || first_key.size(0) == B),
                "native attention: first_key must be int64 (B|1,)");
    first_c = first_key.contiguous();
  }
  const int64_t* firstd = has_first ? first_c.data_ptr<int64_t>() : nullptr;
  const int64_t firstB = has_first && first_c.size(0) > 1 ? 1 : 0;

  const float* qd = q.data_ptr<float>();
  const float* kd = k.data_ptr<float>();
  const float* vd = with_output ? v.data_ptr<float>() : nullptr;
  const float* scd = scale_c.data_ptr<float>();
  const float* sinkd = has_sinks ? sinks_c.data_ptr<float>() : nullptr;
  float* outd = with_output ? out.data_ptr<float>() : nullptr;
  float* std_ = state.data_ptr<float>();
  const int64_t plane = B * Hq * T;  // one accumulator's (B, Hq, T)
  const int64_t qsB = q.stride(0), qsH = q.stride(1), qsT = q.stride(2);
  const int64_t ksB = k.stride(0), ksH = k.stride(1), ksT = k.stride(2);
  const int64_t vsB = with_output ? v.stride(0) : 0, vsH = with_output ? v.stride(1) : 0;
  const int64_t vsT = with_output ? v.stride(2) : 0;

  const int64_t bq = std::min(block_q, std::max<int64_t>(T, 1));
  const int64_t bk = std::min(block_k, std::max<int64_t>(S, 1));
  const int64_t nqb = (T + bq - 1) / bq;

  // key_state: each thread's column state (threads, 3, B, Hq, S), added in thread order after the loop
  // (at::parallel_for hands each thread one contiguous range of tasks: the same sums every run)
  const int64_t threads = key_state ? at::get_num_threads() : 0;
  at::Tensor key_acc = at::zeros({threads, 3, B, Hq, key_state ? S : 0}, opts);
  const int64_t key_plane = B * Hq * S;
  const int64_t nkt = key_state ? (S + bk - 1) / bk + 1 : 0;  // key tiles a block may see (+1: a window's offset)
  at::Tensor counted_c;
  const bool has_counted = key_state && counted.defined() && counted.numel() > 0;
  if (has_counted) {
    TORCH_CHECK(counted.dim() == 2 && counted.scalar_type() == at::kBool &&
                    (counted.size(0) == 1 || counted.size(0) == B) && counted.size(1) == T,
                "native attention: counted must be bool (B|1, T)");
    counted_c = counted.contiguous();
  }
  const bool* countd = has_counted ? counted_c.data_ptr<bool>() : nullptr;
  // count_j: a mask that differs per row is read element by element (count_seen); otherwise each
  // counted row adds +1 at the first key it may attend and −1 after its last (causality and the window
  // leave it one range), the counts are their running sum, times a key mask where there is one
  const bool count_per_row = key_state && mods.md != nullptr && mods.msT != 0;
  const int64_t countB = has_counted && counted_c.size(0) > 1 ? T : 0;

  std::atomic<int64_t> ns_scores{0}, ns_rows{0}, ns_values{0};  // profile: nanoseconds summed over threads
  at::parallel_for(0, B * Hq * nqb, 1, [&](int64_t begin, int64_t end) {
    const int mkl_before = MKL_Set_Num_Threads_Local != nullptr ? MKL_Set_Num_Threads_Local(1) : 0;
    std::vector<float> sbuf(key_state ? 0 : bq * bk), obuf(with_output ? bq * Dv : 0), mrow(bq), lrow(bq),
        urow(bq);
    // key_state: the block's tiles of e, tile t at t · bq · bk as (rows, n), and the max each row's e of
    // tile t was taken at (−inf: the row saw no key yet, its e all 0)
    std::vector<float> tiles(key_state ? nkt * bq * bk : 0), tile_m(key_state ? nkt * bq : 0);
    float* key_sum = nullptr;
    if (key_state) {
      const int64_t tid = at::get_thread_num();
      TORCH_CHECK(tid >= 0 && tid < threads, "native attention: thread ", tid, " outside torch's ", threads);
      key_sum = key_acc.data_ptr<float>() + tid * 3 * key_plane;
    }
    // the extras, rows (bq,) each, in the state's order after m, l, u (w, c, lk, d, f where asked for)
    std::vector<float> xrow((n_state - 3) * bq);
    auto extra_row = [&](bool want, int64_t index) { return want ? xrow.data() + (index - 3) * bq : nullptr; };
    float *wrow = extra_row(want_w, iw), *crow = extra_row(want_c, ic), *lkrow = extra_row(want_lk, ilk);
    float *drow = extra_row(want_d, id), *frow = extra_row(want_f, iff), *mkrow = extra_row(want_mk, imk);
    float* rkrow = extra_row(want_rk, irk);
    float* sprow = extra_row(has_spans, isp);  // range x's row i at sprow[x * bq + i]
    double t_scores = 0, t_rows = 0, t_values = 0;
    Clock::time_point t0, t1, t2;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t qb = task % nqb, h = (task / nqb) % Hq, b = task / (nqb * Hq);
      const int64_t hk = h / G;
      const int64_t q0 = qb * bq, q1 = std::min(q0 + bq, T), rows = q1 - q0;
      const float* qp = qd + b * qsB + h * qsH + q0 * qsT;
      const float* kp = kd + b * ksB + hk * ksH;
      const float* vp = with_output ? vd + b * vsB + hk * vsH : nullptr;
      const float lam = scd[h];
      const float sink = has_sinks ? sinkd[h] : 0.0f;
      const Mods::Head head = mods.head(b, h);
      const int64_t first_start = has_first ? firstd[b * firstB] : 0;  // f's keys: [first_start, + K)
      const int64_t* ranges = has_spans ? spand + b * spansB : nullptr;  // (n, 2): this batch row's
      for (int64_t i = 0; i < rows; ++i) {
        mrow[i] = has_sinks ? sink : kNegInf;
        lrow[i] = has_sinks ? 1.0f : 0.0f;
        urow[i] = 0.0f;
      }
      std::fill(xrow.begin(), xrow.end(), 0.0f);
      if (want_c && has_sinks) {  // the sink's e^(σ − m)² = 1
        for (int64_t i = 0; i < rows; ++i) crow[i] = 1.0f;
      }
      if (want_mk) std::fill(mkrow, mkrow + rows, kNegInf);  // no key seen yet
      if (with_output) std::fill(obuf.begin(), obuf.end(), 0.0f);
      const auto [k_start, k_end] = mods.keys_for_rows(q0, q1, offset);  // the keys its rows may see
      int64_t tile = 0;  // key_state: this tile's place in `tiles`
      for (int64_t k0 = k_start; k0 < k_end; k0 += bk, ++tile) {
        const int64_t k1 = std::min(k0 + bk, k_end), n = k1 - k0;
        float* sb = key_state ? tiles.data() + tile * bq * bk : sbuf.data();
        if (profile) t0 = Clock::now();
        // scores, row-major (rows, n): column-major (n, rows) = (K_blk)ᵀ-op · Q_blk
        gemm('T', 'N', n, rows, D, lam, kp + k0 * ksT, ksT, qp, qsT, 0.0f, sb, n);
        if (profile) t1 = Clock::now();
        for (int64_t i = 0; i < rows; ++i) {
          float* s = sb + i * n;
          const int64_t pos = q0 + i + offset;  // the row's position among the keys
          mods.apply(head, s, n, q0 + i, pos, k0);
          if (count_per_row && (countd == nullptr || countd[b * countB + q0 + i])) {
            count_seen(s, n, key_sum + 2 * key_plane + (b * Hq + h) * S + k0);
          }
          const float m_old = mrow[i], s_max = row_max(s, n);
          if (want_mk) mkrow[i] = std::max(mkrow[i], s_max);
          const float m_new = std::max(m_old, s_max);
          if (key_state) tile_m[tile * bq + i] = m_new;
          if (m_new == kNegInf) {  // nothing seen yet: e = 0, the state stays the identity
            std::fill(s, s + n, 0.0f);
            continue;
          }
          const float alpha = exp_scalar(m_old - m_new);  // 0 while m_old = −inf
          float se, sed;
          const float l_old = lrow[i], u_old = urow[i];
          const float delta = l_old > 0 ? m_old - m_new : 0.0f;
          if (any_extra) {
            TileSums t;
            row_exp_extra(s, n, m_new, static_cast<float>(pos - k0), t);
            se = t.e;
            sed = t.ed;
            if (want_w) wrow[i] = alpha * (wrow[i] + 2 * delta * u_old + delta * delta * l_old) + t.edd;
            if (want_c) crow[i] = alpha * alpha * crow[i] + t.ee;
            if (want_lk) lkrow[i] = alpha * lkrow[i] + se;
            if (want_d) drow[i] = alpha * drow[i] + t.eb;
            if (want_f) {  // keys first_start <= j < first_start + first_keys of this tile (s holds e now)
              float first = 0.0f;
              const int64_t stop = std::min<int64_t>(n, first_start + first_keys - k0);
              for (int64_t j = std::max<int64_t>(0, first_start - k0); j < stop; ++j) first += s[j];
              frow[i] = alpha * frow[i] + first;
            }
            if (want_rk) {  // keys pos − recent_keys < k0 + j <= pos of this tile (s holds e now)
              float recent = 0.0f;
              const int64_t stop = std::min<int64_t>(n, pos + 1 - k0);
              const int64_t from = std::max<int64_t>(0, pos - recent_keys + 1 - k0);
              for (int64_t j = from; j < stop; ++j) recent += s[j];
              rkrow[i] = alpha * rkrow[i] + recent;
            }
          } else {
            row_exp(s, n, m_new, se, sed);
          }
          for (int64_t x = 0; x < n_spans; ++x) {  // keys lo <= k0 + j < hi of this tile (s holds e now)
            const int64_t from = std::max<int64_t>(0, ranges[2 * x] - k0);
            const int64_t stop = std::min<int64_t>(n, ranges[2 * x + 1] - k0);
            float* sp = sprow + x * bq + i;
            *sp = alpha * *sp + (from < stop ? row_sum(s + from, stop - from) : 0.0f);
          }
          urow[i] = alpha * (u_old + delta * l_old) + sed;
          lrow[i] = alpha * l_old + se;
          mrow[i] = m_new;
          if (with_output && alpha != 1.0f) {
            float* o = obuf.data() + i * Dv;
            for (int64_t d = 0; d < Dv; ++d) o[d] *= alpha;
          }
        }
        if (profile) t2 = Clock::now();
        if (with_output) {  // o (rows, Dv) += e (rows, n) · V_blk (n, Dv); column-major (Dv, rows)
          gemm('N', 'N', Dv, rows, n, 1.0f, vp + k0 * vsT, vsT, sb, n, 1.0f, obuf.data(), Dv);
        }
        if (profile) {
          t_scores += seconds(t0, t1);
          t_rows += seconds(t1, t2);
          t_values += seconds(t2, Clock::now());
        }
      }
      if (key_state) {  // the block's rows are final: p = e · e^(m_t − m) / l into each tile's keys
        float* sum_bh = key_sum + (b * Hq + h) * S;
        if (!count_per_row) {  // each counted row's range of keys [lo, hi], as differences
          float* diff = sum_bh + 2 * key_plane;
          for (int64_t i = 0; i < rows; ++i) {
            if (countd != nullptr && !countd[b * countB + q0 + i]) continue;
            const int64_t pos = q0 + i + offset;
            const int64_t hi = causal ? std::min(pos, S - 1) : S - 1;
            const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
            if (hi < lo) continue;
            diff[lo] += 1.0f;
            if (hi + 1 < S) diff[hi + 1] -= 1.0f;
          }
        }
        int64_t t = 0;
        for (int64_t k0 = k_start; k0 < k_end; k0 += bk, ++t) {
          const int64_t n = std::min(k0 + bk, k_end) - k0;
          const float* e = tiles.data() + t * bq * bk;
          for (int64_t i = 0; i < rows; ++i) {
            const float mt = tile_m[t * bq + i], l = lrow[i];
            if (mt == kNegInf || !(l > 0) || (countd != nullptr && !countd[b * countB + q0 + i])) continue;
            const float f = exp_scalar(mt - mrow[i]) / l;
            if (f == 0.0f) continue;  // every p of this tile underflows: adds 0, and 0 is not above a max
            add_received(e + i * n, n, f, sum_bh + k0, sum_bh + key_plane + k0);
          }
        }
      }
      for (int64_t i = 0; i < rows; ++i) {
        const float l = lrow[i];
        const int64_t row = q0 + i;
        float* at = std_ + (b * Hq + h) * T + row;  // this row's m; its other accumulators a plane apart
        at[0] = mrow[i];
        at[plane] = l;
        at[2 * plane] = urow[i];
        for (int64_t x = 3; x < n_state; ++x) at[x * plane] = xrow[(x - 3) * bq + i];
        if (with_output) {
          float* o = outd + ((b * T + row) * Hq + h) * Dv;
          const float* acc = obuf.data() + i * Dv;
          const float inv = l > 0 ? 1.0f / l : 0.0f;
          for (int64_t d = 0; d < Dv; ++d) o[d] = acc[d] * inv;
        }
      }
    }
    if (MKL_Set_Num_Threads_Local != nullptr) MKL_Set_Num_Threads_Local(mkl_before);
    if (profile) {
      ns_scores += static_cast<int64_t>(t_scores * 1e9);
      ns_rows += static_cast<int64_t>(t_rows * 1e9);
      ns_values += static_cast<int64_t>(t_values * 1e9);
    }
  });
  at::Tensor times = at::empty({0}, q.options().dtype(at::kDouble));
  if (profile) {
    times = at::tensor({ns_scores.load() * 1e-9, ns_rows.load() * 1e-9, ns_values.load() * 1e-9},
                       q.options().dtype(at::kDouble));
  }
  at::Tensor keys = at::empty({0}, opts);
  if (key_state) {  // the threads' states in thread order: sums and counts added, maxima the larger
    keys = at::empty({3, B, Hq, S}, opts);
    keys[0].copy_(key_acc.select(1, 0).sum(0));
    keys[1].copy_(std::get<0>(key_acc.select(1, 1).max(0)));
    keys[2].copy_(key_acc.select(1, 2).sum(0));
    if (!count_per_row) {
      keys[2].copy_(keys[2].cumsum(-1));
      if (mods.md != nullptr) keys[2].mul_(mods.mask_c.select(2, 0).to(at::kFloat));
    }
  }
  return {out, state, times, keys};
}

namespace {

// The column pass's per-key sums over one row of scores s (n keys, −inf where the row may not attend)
// whose log-sum-exp is lse: sum_j += p, max_j = max(max_j, p), count_j += 1 where s_j > −inf, with
// p = e^(s_j − lse) (0 for a masked key: exp8 and exp_scalar give 0 below ln(FLT_MIN), −inf included).
inline void row_received(const float* s, int64_t n, float lse, float* sum, float* mx, float* count) {
  int64_t j = 0;
#ifdef EL_AVX2
  const __m256 vl = _mm256_set1_ps(lse), ninf = _mm256_set1_ps(kNegInf), one = _mm256_set1_ps(1.0f);
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_loadu_ps(s + j);
    const __m256 p = exp8(_mm256_sub_ps(x, vl));
    const __m256 seen = _mm256_and_ps(_mm256_cmp_ps(x, ninf, _CMP_GT_OQ), one);
    _mm256_storeu_ps(sum + j, _mm256_add_ps(_mm256_loadu_ps(sum + j), p));
    _mm256_storeu_ps(mx + j, _mm256_max_ps(_mm256_loadu_ps(mx + j), p));
    _mm256_storeu_ps(count + j, _mm256_add_ps(_mm256_loadu_ps(count + j), seen));
  }
#endif
  for (; j < n; ++j) {
    const float p = exp_scalar(s[j] - lse);
    sum[j] += p;
    mx[j] = std::max(mx[j], p);
    count[j] += s[j] > kNegInf ? 1.0f : 0.0f;
  }
}

}  // namespace

// The column pass of attention received (kernels/received.py): per key j of each query head, over the
// rows i whose log-sum-exp lse_i is finite (+inf: a row that counts for nothing), with p_ij =
// e^(s_ij − lse_i) recomputed from the score tile as flash attention's backward does:
//   sum_j = Σ_i p_ij,  max_j = max_i p_ij,  count_j = #{i : row i may attend key j}
// q, k, scale, mask, window, softcap, alibi, key_bias, offset as `forward`; lse (B, Hq, T) float32.
// Tasks are (batch, query head, key block), each owning its keys (no two threads write one key); a
// task runs over the query blocks whose rows may see its keys (causal: from the block's first key on;
// a window: up to the rows whose window reaches its last key), one GEMM per (query block, key block).
// -> (3, B, Hq, S) float32: sum, max, count.
at::Tensor received(const at::Tensor& q, const at::Tensor& k, const at::Tensor& scale, const at::Tensor& lse,
                    bool causal, const at::Tensor& mask, int64_t window, double softcap, const at::Tensor& alibi,
                    const at::Tensor& key_bias, int64_t offset, int64_t block_q, int64_t block_k) {
  for (const at::Tensor* t : {&q, &k}) {
    TORCH_CHECK(t->dim() == 4 && t->scalar_type() == at::kFloat && t->stride(3) == 1,
                "native received: q, k must be 4-D float32 with unit last stride");
  }
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2);
  TORCH_CHECK(k.size(0) == B && k.size(3) == D && Hkv > 0 && Hq % Hkv == 0, "native received: q/k shapes");
  TORCH_CHECK(q.stride(2) >= D && k.stride(2) >= D, "native received: rows of q, k must not overlap");
  TORCH_CHECK(lse.dim() == 3 && lse.scalar_type() == at::kFloat && lse.size(0) == B && lse.size(1) == Hq &&
                  lse.size(2) == T,
              "native received: lse must be (B, Hq, T) float32");
  TORCH_CHECK(block_q >= 1 && block_k >= 1, "native received: block sizes must be >= 1");
  const int64_t G = Hq / Hkv;
  const Mods mods("native received", causal, mask, window, softcap, alibi, key_bias, Hq, S);
  at::Tensor scale_c = scale.contiguous(), lse_c = lse.contiguous();
  const float* qd = q.data_ptr<float>();
  const float* kd = k.data_ptr<float>();
  const float* scd = scale_c.data_ptr<float>();
  const float* lsed = lse_c.data_ptr<float>();
  const int64_t qsB = q.stride(0), qsH = q.stride(1), qsT = q.stride(2);
  const int64_t ksB = k.stride(0), ksH = k.stride(1), ksT = k.stride(2);

  at::Tensor state = at::zeros({3, B, Hq, S}, q.options().dtype(at::kFloat));
  float* std_ = state.data_ptr<float>();
  const int64_t plane = B * Hq * S;
  const int64_t bq = std::min(block_q, std::max<int64_t>(T, 1));
  const int64_t bk = std::min(block_k, std::max<int64_t>(S, 1));
  const int64_t nkb = (S + bk - 1) / bk;

  at::parallel_for(0, B * Hq * nkb, 1, [&](int64_t begin, int64_t end) {
    const int mkl_before = MKL_Set_Num_Threads_Local != nullptr ? MKL_Set_Num_Threads_Local(1) : 0;
    std::vector<float> sbuf(bq * bk);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t kb = task % nkb, h = (task / nkb) % Hq, b = task / (nkb * Hq);
      const int64_t hk = h / G;
      const int64_t k0 = kb * bk, k1 = std::min(k0 + bk, S), n = k1 - k0;
      const float* kp = kd + b * ksB + hk * ksH;
      const float lam = scd[h];
      const Mods::Head head = mods.head(b, h);
      const float* lrow = lsed + (b * Hq + h) * T;
      float* at = std_ + (b * Hq + h) * S + k0;  // this task's sums; max and count a plane apart
      float *sum = at, *mx = at + plane, *count = at + 2 * plane;
      const auto [q_start, q_end] = mods.rows_for_keys(k0, k1, T, offset);  // the rows that may see its keys
      for (int64_t q0 = q_start; q0 < q_end; q0 += bq) {
        const int64_t rows = std::min(bq, q_end - q0);
        float* sb = sbuf.data();
        const float* qp = qd + b * qsB + h * qsH + q0 * qsT;
        gemm('T', 'N', n, rows, D, lam, kp + k0 * ksT, ksT, qp, qsT, 0.0f, sb, n);
        for (int64_t i = 0; i < rows; ++i) {
          const float lse_i = lrow[q0 + i];
          if (!(lse_i < std::numeric_limits<float>::infinity())) continue;  // a row that counts for nothing
          float* s = sb + i * n;
          const int64_t pos = q0 + i + offset;
          mods.apply(head, s, n, q0 + i, pos, k0);
          row_received(s, n, lse_i, sum, mx, count);
        }
      }
    }
    if (MKL_Set_Num_Threads_Local != nullptr) MKL_Set_Num_Threads_Local(mkl_before);
  });
  return state;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  pybind11::class_<ForwardArgs>(m, "ForwardArgs", "the row pass's arguments (`forward`), set by name")
      .def(pybind11::init<>())
      .def_readwrite("q", &ForwardArgs::q)
      .def_readwrite("k", &ForwardArgs::k)
      .def_readwrite("v", &ForwardArgs::v)
      .def_readwrite("scale", &ForwardArgs::scale)
      .def_readwrite("mask", &ForwardArgs::mask)
      .def_readwrite("sinks", &ForwardArgs::sinks)
      .def_readwrite("alibi", &ForwardArgs::alibi)
      .def_readwrite("key_bias", &ForwardArgs::key_bias)
      .def_readwrite("first_key", &ForwardArgs::first_key)
      .def_readwrite("counted", &ForwardArgs::counted)
      .def_readwrite("spans", &ForwardArgs::spans)
      .def_readwrite("causal", &ForwardArgs::causal)
      .def_readwrite("window", &ForwardArgs::window)
      .def_readwrite("softcap", &ForwardArgs::softcap)
      .def_readwrite("offset", &ForwardArgs::offset)
      .def_readwrite("extra", &ForwardArgs::extra)
      .def_readwrite("first_keys", &ForwardArgs::first_keys)
      .def_readwrite("recent_keys", &ForwardArgs::recent_keys)
      .def_readwrite("block_q", &ForwardArgs::block_q)
      .def_readwrite("block_k", &ForwardArgs::block_k)
      .def_readwrite("profile", &ForwardArgs::profile)
      .def_readwrite("key_state", &ForwardArgs::key_state);
  m.def("forward", &forward, "attention output and its row statistics' state from the same score tiles (CPU)");
  m.def("received", &received, "the column pass of attention received: per key sum, max and count (CPU)");
}
