// The trainer's flag table (src/apps/trainer_flags.h) against what users read: every
// numeric flag's range is the one docs/OPERATIONS.md §7 states, and every flag named in
// §7 exists. COLONNADE_SOURCE_DIR points at the project root.
#include "apps/trainer_flags.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace {

struct DocRow {
  std::vector<std::string> flags;  // trainer flags named in the first cell
  std::vector<double> numbers;     // every number of the second cell
  std::string text;
};

// The rows of §7's table: "| `--a`, `--b` | 0 (...) … 10^12 | why |".
std::vector<DocRow> SectionSevenRows() {
  const char* root = std::getenv("COLONNADE_SOURCE_DIR");
  std::ifstream in(std::string(root ? root : ".") + "/docs/OPERATIONS.md");
  std::stringstream all;
  all << in.rdbuf();
  const std::string doc = all.str();
  const size_t begin = doc.find("## 7. Flag ranges");
  const size_t end = doc.find("\n## 8.", begin);
  EXPECT_NE(begin, std::string::npos) << "docs/OPERATIONS.md has no section 7";
  std::vector<DocRow> rows;
  if (begin == std::string::npos) return rows;
  for (absl::string_view line : absl::StrSplit(doc.substr(begin, end - begin), '\n')) {
    if (!absl::ConsumePrefix(&line, "| `")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (cells.size() < 2) continue;
    DocRow row;
    row.text = std::string(line);
    if (cells[0].find("checkpoint_diff") != std::string::npos) continue;  // another program
    static const std::regex kFlag("--([a-z_0-9]+)");
    for (std::sregex_iterator it(cells[0].begin(), cells[0].end(), kFlag), e; it != e; ++it) {
      row.flags.push_back((*it)[1]);
    }
    // "10^12" -> 1e12, "−1" (a typographic minus) -> -1, "0.001", "16777216".
    std::string value = std::regex_replace(cells[1], std::regex("\xE2\x88\x92"), "-");
    static const std::regex kNumber("(-?[0-9]+(\\.[0-9]+)?)(\\^([0-9]+))?");
    for (std::sregex_iterator it(value.begin(), value.end(), kNumber), e; it != e; ++it) {
      double v = std::stod((*it)[1]);
      if ((*it)[4].matched) v = std::pow(v, std::stod((*it)[4]));
      row.numbers.push_back(v);
    }
    rows.push_back(row);
  }
  return rows;
}

bool Near(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

TEST(TrainerFlagsTest, EveryRangeIsTheOneOperationsMdStates) {
  const std::vector<DocRow> rows = SectionSevenRows();
  ASSERT_FALSE(rows.empty());
  for (const TrainerFlagSpec& f : TrainerFlagSpecs()) {
    if (!f.range.has_range) continue;
    const DocRow* found = nullptr;
    for (const DocRow& r : rows)
      for (const std::string& n : r.flags)
        if (n == f.name) found = &r;
    ASSERT_NE(found, nullptr) << "--" << f.name << " has a range but no row in OPERATIONS.md §7";
    auto has = [&](double v) {
      for (double x : found->numbers)
        if (Near(x, v)) return true;
      return false;
    };
    EXPECT_TRUE(has(f.range.min)) << "--" << f.name << ": min " << f.range.min << " not in '"
                                  << found->text << "'";
    EXPECT_TRUE(has(f.range.max)) << "--" << f.name << ": max " << f.range.max << " not in '"
                                  << found->text << "'";
    if (f.range.recipe_sentinel) {
      EXPECT_TRUE(has(-1)) << "--" << f.name << ": the recipe's -1 not in '" << found->text << "'";
    }
  }
}

TEST(TrainerFlagsTest, EveryFlagOperationsMdNamesExists) {
  std::set<std::string> names;
  for (const TrainerFlagSpec& f : TrainerFlagSpecs()) names.insert(f.name);
  for (const DocRow& r : SectionSevenRows())
    for (const std::string& n : r.flags) EXPECT_TRUE(names.count(n)) << "§7 names --" << n;
}

TEST(TrainerFlagsTest, NamesAreUniqueAndRangesSane) {
  std::set<std::string> names;
  for (const TrainerFlagSpec& f : TrainerFlagSpecs()) {
    EXPECT_TRUE(names.insert(f.name).second) << "--" << f.name << " twice";
    EXPECT_GT(std::string(f.help).size(), 10u) << "--" << f.name << " has no help";
    if (f.range.has_range) EXPECT_LT(f.range.min, f.range.max) << f.name;
  }
  // The check and the --help text read the same list.
  size_t ranged = 0;
  for (const TrainerFlagSpec& f : TrainerFlagSpecs()) ranged += f.range.has_range;
  EXPECT_EQ(TrainerFlagRanges().size(), ranged);
}

}  // namespace
}  // namespace colonnade
