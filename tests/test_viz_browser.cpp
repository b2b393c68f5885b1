// `roam viz` HTML in a real browser: Debian's headless chromium renders the page of a benchmark
// plan to a PNG, which is decoded here (zlib) and checked: its size, that it is not blank, that
// the arena's colours, the phase bands and the peak marker are drawn, and that the page's
// script runs (the "zoom to the peak" view, opened with #zoom-peak, differs from the full view).
// Without chromium (apt-get install chromium) the test is skipped with a message.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <zlib.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "testing.h"

namespace {

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<std::array<uint8_t, 3>> rgb;  // row-major
};

uint32_t be32(const std::string& s, size_t at) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(s[at])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<uint8_t>(s[at + 3]));
}

/// A minimal PNG reader: 8-bit RGB or RGBA, not interlaced (what chromium writes).
Image decode_png(const std::string& png) {
  if (png.size() < 8 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) throw std::runtime_error("not a PNG");
  Image img;
  int channels = 0;
  std::string idat;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    if (at + 12 + len > png.size()) throw std::runtime_error("truncated chunk");
    if (type == "IHDR") {
      img.width = be32(png, at + 8);
      img.height = be32(png, at + 12);
      const int depth = static_cast<uint8_t>(png[at + 16]), color = static_cast<uint8_t>(png[at + 17]);
      if (depth != 8 || (color != 2 && color != 6) || png[at + 20] != 0) {
        throw std::runtime_error("unsupported PNG (depth " + std::to_string(depth) + ", colour type " +
                                 std::to_string(color) + ")");
      }
      channels = color == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      idat += png.substr(at + 8, len);
    }
    at += 12 + len;
  }
  if (channels == 0) throw std::runtime_error("no IHDR");
  const size_t stride = static_cast<size_t>(img.width) * channels;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size()) {
    throw std::runtime_error("bad image data");
  }
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height);
  for (uint32_t y = 0; y < img.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? cur[i - channels] : 0;
      const int b = prev[i];
      const int c = i >= static_cast<size_t>(channels) ? prev[i - channels] : 0;
      int pred = 0;
      switch (filter) {
        case 0: pred = 0; break;
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default: throw std::runtime_error("bad filter");
      }
      cur[i] = static_cast<uint8_t>(in[i] + pred);
    }
    for (uint32_t x = 0; x < img.width; ++x) {
      img.rgb[static_cast<size_t>(y) * img.width + x] = {cur[x * channels], cur[x * channels + 1], cur[x * channels + 2]};
    }
    std::swap(prev, cur);
  }
  return img;
}

std::string find_chromium() {
  if (const char* env = std::getenv("ROAM_CHROMIUM"); env && *env) {
    return std::filesystem::exists(env) ? env : "";
  }
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

int sh(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/// Pixels within `tol` of the colour (per channel).
size_t count_colour(const Image& img, uint8_t r, uint8_t g, uint8_t b, int tol = 6) {
  size_t n = 0;
  for (const auto& p : img.rgb) {
    if (std::abs(p[0] - r) <= tol && std::abs(p[1] - g) <= tol && std::abs(p[2] - b) <= tol) ++n;
  }
  return n;
}

constexpr int kWindowW = 1360, kWindowH = 1560;

/// Renders `html` (with the URL fragment) to `png`; returns chromium's exit status.
int screenshot(const std::string& chromium, const roamtest::TempDir& dir, const std::string& html,
               const std::string& fragment, const std::string& png) {
  const std::string profile = dir.file("profile-" + std::filesystem::path(png).stem().string());
  std::filesystem::create_directories(profile);
  const std::string cmd =
      "timeout 120 " + chromium +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --hide-scrollbars --user-data-dir=" + profile + " --window-size=" + std::to_string(kWindowW) +
      "," + std::to_string(kWindowH) + " --virtual-time-budget=3000 --screenshot=" + png +
      " 'file://" + html + fragment + "' > " + dir.file("chromium.log") + " 2>&1";
  return sh(cmd);
}

TEST(VizBrowser, ChromiumRendersThePage) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium is not installed (apt-get install -y chromium, or set ROAM_CHROMIUM): "
                    "the browser check of roam viz is skipped";
  }
  roamtest::TempDir dir;
  const std::string graph =
      std::string(ROAM_FIXTURES) + "/../../bench/graphs/mobilenet_v2-b1-adam.json.gz";
  ASSERT_EQ(sh(std::string(ROAM_BIN) + " plan -q " + graph + " -o " + dir.file("p.json") + " > /dev/null"), 0);
  ASSERT_EQ(sh(std::string(ROAM_BIN) + " viz -q " + graph + " " + dir.file("p.json") + " -o " +
               dir.file("v.html") + " --orders roam,program,lescea > /dev/null"),
            0);
  const std::string html = std::filesystem::absolute(dir.file("v.html")).string();
  const std::string full = dir.file("full.png"), zoomed = dir.file("peak.png");
  ASSERT_EQ(screenshot(chromium, dir, html, "", full), 0) << roamtest::read_text(dir.file("chromium.log"));
  ASSERT_EQ(screenshot(chromium, dir, html, "#zoom-peak", zoomed), 0)
      << roamtest::read_text(dir.file("chromium.log"));
  if (const char* keep = std::getenv("ROAM_KEEP_SCREENSHOTS"); keep && *keep) {
    std::filesystem::copy_file(full, std::string(keep) + "/viz-full.png",
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::copy_file(zoomed, std::string(keep) + "/viz-peak.png",
                               std::filesystem::copy_options::overwrite_existing);
  }
  const Image img = decode_png(roamtest::read_text(full));
  EXPECT_EQ(img.width, static_cast<uint32_t>(kWindowW));
  EXPECT_EQ(img.height, static_cast<uint32_t>(kWindowH));
  size_t non_white = 0;
  for (const auto& p : img.rgb) non_white += (p[0] < 245 || p[1] < 245 || p[2] < 245) ? 1 : 0;
  const double frac = static_cast<double>(non_white) / static_cast<double>(img.rgb.size());
  EXPECT_GT(frac, 0.08) << "the page looks blank";
  EXPECT_LT(frac, 0.9) << "the page is one colour";
  // The arena's rectangles (activation blue, gradient red), the phase bands, the peak line.
  EXPECT_GT(count_colour(img, 0x4e, 0x79, 0xa7), 2000u) << "no activations drawn";
  EXPECT_GT(count_colour(img, 0xe1, 0x57, 0x59), 150u) << "no gradients drawn";
  EXPECT_GT(count_colour(img, 0xdb, 0xe8, 0xf6, 3), 500u) << "no forward phase band";
  EXPECT_GT(count_colour(img, 0xf8, 0xde, 0xde, 3), 500u) << "no backward phase band";
  // The script ran: the zoomed view is another picture of the same size.
  const Image z = decode_png(roamtest::read_text(zoomed));
  ASSERT_EQ(z.width, img.width);
  ASSERT_EQ(z.height, img.height);
  size_t differ = 0;
  for (size_t i = 0; i < z.rgb.size(); ++i) differ += z.rgb[i] != img.rgb[i] ? 1 : 0;
  EXPECT_GT(differ, img.rgb.size() / 50) << "#zoom-peak changed nothing: the page's script did not run";
}

}  // namespace
