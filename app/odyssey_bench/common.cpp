#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench.h"

namespace fs = std::filesystem;

namespace odyssey::bench {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

double sig(double x, int n) {
  if (x == 0 || !std::isfinite(x)) return x;
  const double m = std::pow(10.0, n - 1 - static_cast<int>(std::floor(std::log10(std::abs(x)))));
  return std::round(x * m) / m;
}

std::string shape_file(const std::string& shape) {
  if (fs::is_regular_file(shape)) return shape;
  for (const auto& e : fs::directory_iterator(fs::path(ODYSSEY_SOURCE_DIR) / "resources" / "model-shapes")) {
    std::string stem = e.path().stem().string();
    stem = stem.substr(stem.find("--") == std::string::npos ? 0 : stem.find("--") + 2);
    std::string a = stem, b = shape;
    std::transform(a.begin(), a.end(), a.begin(), ::tolower);
    std::transform(b.begin(), b.end(), b.begin(), ::tolower);
    if (a == b) return e.path().string();
  }
  return {};
}

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace odyssey::bench
