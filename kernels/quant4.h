// 4-bit base weights for QLoRA in bitsandbytes' layout (docs/qlora.md), so a checkpoint that
// transformers + bitsandbytes saved loads as it is and one Odyssey writes loads there:
//
//  - the weight, flattened row-major, in blocks of `blocksize` values (64 by default; bitsandbytes
//    accepts 32 … 4096, powers of two); per block absmax = max |x|, each value divided by it
//    and rounded to the nearest of 16 code values (NF4: the normal-quantile table of the QLoRA
//    paper; FP4: 1 sign, 2 exponent and 1 mantissa bit, scaled to [-1, 1]). Two codes per byte,
//    the first element in the high nibble; `packed` is uint8 [(numel + 1) / 2, 1].
//  - double quantization: the fp32 absmax values less their mean (`offset`) quantized again in
//    blocks of 256 to 8 bits on bitsandbytes' signed dynamic map, with one fp32 absmax per
//    block (`nested_absmax`).
//
// quantize_4bit computes exactly what bitsandbytes 0.50's CPU quantizer computes (the same
// fp32 operations in the same order: bit-identical bytes and constants, tests/kernels/
// tst_quant4.cpp against bitsandbytes itself). dequantize_4bit gives code × absmax in fp32,
// then one rounding to the requested dtype, as bitsandbytes does. ATen ops, the same code on
// the CPU and on CUDA; the projections dequantize one weight at a time (linear.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace odyssey::kernels {

enum class Quant4Type { NF4, FP4 };

const char* quant4_type_name(Quant4Type t);                         // "nf4", "fp4"
std::optional<Quant4Type> parse_quant4_type(const std::string& s);  // "nf4"/"fp4", else none
bool valid_quant4_blocksize(std::int64_t blocksize);                // bitsandbytes' sizes

struct Quant4Weight : torch::CustomClassHolder {
  Quant4Type type = Quant4Type::NF4;
  std::int64_t blocksize = 64;
  std::vector<std::int64_t> shape;             // the weight's, [out, in] for a projection
  torch::ScalarType dtype = torch::kBFloat16;  // what it was quantized from (bitsandbytes' "dtype")
  torch::Tensor packed;                        // uint8 [(numel + 1) / 2, 1]
  torch::Tensor code;                          // fp32 [16]: the value of each 4-bit code ("quant_map")
  torch::Tensor absmax;                        // fp32 [blocks], or uint8 [blocks] when nested
  // Double quantization (nested): absmax = nested_code[absmax] * nested_absmax[block / 256] + offset.
  bool nested = false;
  std::int64_t nested_blocksize = 256;
  torch::Tensor nested_absmax;  // fp32 [ceil(blocks / nested_blocksize)]
  torch::Tensor nested_code;    // fp32 [256]
  float offset = 0.0f;

  std::int64_t numel() const;
  std::int64_t blocks() const;  // ceil(numel / blocksize)
  std::int64_t nbytes() const;  // packed + constants, what the weight costs in memory
  torch::Device device() const { return packed.device(); }
  // Every tensor moved to `d` (a copy of the metadata).
  c10::intrusive_ptr<Quant4Weight> to(const torch::Device& d) const;
};

// The 16 code values of a type (fp32, on `device`) and bitsandbytes' signed 8-bit dynamic map
// (create_dynamic_map(signed=True): 256 ascending values in [-0.993, 1]).
torch::Tensor quant4_code(Quant4Type t, const torch::Device& device = torch::kCPU);
torch::Tensor dynamic_map_signed(const torch::Device& device = torch::kCPU);

// w: bf16/fp16/fp32, any shape; the result lives on w's device.
c10::intrusive_ptr<Quant4Weight> quantize_4bit(const torch::Tensor& w, Quant4Type type, std::int64_t blocksize = 64,
                                               bool double_quant = true);

// The fp32 absmax per block (the nested constants expanded).
torch::Tensor quant4_absmax(const Quant4Weight& q);

// Rows first .. first + count - 1 of dimension 0 (experts first .. of a stacked [E, out, in]
// weight: a rank's share under expert parallelism), as a weight of its own that dequantizes to
// exactly those rows of q's dequantized values: the packed bytes of the rows and their blocks'
// absmax as fp32 (the nested constants expanded, quant4_absmax; re-nesting a slice would round
// them anew, since bitsandbytes' offset is the mean over the whole tensor). A row must hold
// whole blocks (numel / shape[0] a multiple of blocksize); otherwise an error naming the sizes.
c10::intrusive_ptr<Quant4Weight> slice_4bit(const Quant4Weight& q, std::int64_t first, std::int64_t count);

// The weight in `dtype`, shape q.shape, on q's device.
torch::Tensor dequantize_4bit(const Quant4Weight& q, torch::ScalarType dtype);

// y = x W^T (+ bias) for the 4-bit W, W dequantized to x's dtype for the product and again
// for the input's gradient in backward: nothing of W's size is kept between them. W gets no
// gradient (a frozen QLoRA base); the bias gets one when it requires it.
torch::Tensor quant4_linear(const torch::Tensor& x, const c10::intrusive_ptr<Quant4Weight>& w,
                            const torch::Tensor& bias = torch::Tensor());

// The 8-bit blockwise quantization the nested constants use, exposed for the tests: codes
// (uint8, x's numel) and the fp32 absmax per block; nearest code of `code` (ascending) to
// x / absmax, ties to the lower code.
std::pair<torch::Tensor, torch::Tensor> quantize_blockwise_8bit(const torch::Tensor& x, const torch::Tensor& code,
                                                                std::int64_t blocksize);

}  // namespace odyssey::kernels
