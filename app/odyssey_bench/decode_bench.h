// odyssey-bench --decode (decode_bench.cpp): generation speed of a shape with random weights.
#pragma once

namespace odyssey::bench {

// argv as main's; returns the exit code. Bad arguments throw std::invalid_argument.
int decode_bench(int argc, char** argv);

}  // namespace odyssey::bench
