// core/paths.h: one JoinPath and one MakeDirs for every module.
#include "core/paths.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colonnade {
namespace {

TEST(Paths, JoinPath) {
  EXPECT_EQ(JoinPath("", "a.h5"), "a.h5");
  EXPECT_EQ(JoinPath("dir", "a.h5"), "dir/a.h5");
  EXPECT_EQ(JoinPath("dir/", "a.h5"), "dir/a.h5");
  EXPECT_EQ(JoinPath("/x/y", "train"), "/x/y/train");
}

TEST(Paths, MakeDirsCreatesParentsFollowsTheUmaskAndRefusesAFile) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/colonnade-paths-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  ASSERT_NE(mkdtemp(buf.data()), nullptr);
  const std::string root = buf.data();
  const mode_t old_mask = umask(022);
  const std::string deep = root + "/a/b/c";
  EXPECT_TRUE(MakeDirs(deep, "checkpoint directory").ok());
  EXPECT_TRUE(MakeDirs(deep, "checkpoint directory").ok());  // already there: fine
  EXPECT_TRUE(MakeDirs("", "checkpoint directory").ok());
  struct stat st;
  ASSERT_EQ(stat(deep.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0755u);  // 0777 minus the umask
  umask(002);
  ASSERT_TRUE(MakeDirs(root + "/shared", "directory").ok());
  ASSERT_EQ(stat((root + "/shared").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0775u);
  umask(old_mask);

  const std::string file = root + "/file";
  std::ofstream(file) << "x";
  absl::Status s = MakeDirs(file, "checkpoint directory");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(s.message(), "checkpoint directory " + file + " is not a directory");
  s = MakeDirs(file + "/below", "directory");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(s.message().rfind("cannot create directory " + file + "/below: ", 0), 0u) << s;
  std::system(("rm -rf '" + root + "'").c_str());
}

TEST(Paths, IsDirectory) {
  EXPECT_TRUE(IsDirectory("/"));
  EXPECT_FALSE(IsDirectory("/nonexistent/colonnade"));
  EXPECT_FALSE(IsDirectory("/proc/self/status"));  // a file
}

TEST(Paths, CheckRegularFile) {
  EXPECT_TRUE(absl::IsNotFound(CheckRegularFile("/nonexistent/colonnade")));
  absl::Status s = CheckRegularFile("/");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(s.message(), "/: is a directory, not a regular file");
}

}  // namespace
}  // namespace colonnade
