// actkit/core/files.h: the file-system calls ACTkit makes instead of
// std::filesystem (which PyTorch's wheels export a copy of).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include <fstream>
#include <string>
#include <vector>

#include "actkit/core/errors.h"
#include "actkit/core/files.h"
#include "test_util.h"

namespace actkit {
namespace {

void put_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Files, MakesListsAndRemovesTrees) {
  test::TempDir dir;
  const std::string deep = dir.file("a/b/c");
  files::create_directories(deep);
  files::create_directories(deep);  // an existing folder is fine
  EXPECT_TRUE(files::is_directory(deep));
  put_text(deep + "/x", "1");
  put_text(dir.file("a/z"), "2");
  put_text(dir.file("a/m"), "3");
  EXPECT_EQ(files::list_directory(dir.file("a")), (std::vector<std::string>{"b", "m", "z"}));
  EXPECT_TRUE(files::is_regular_file(dir.file("a/z")));
  EXPECT_FALSE(files::is_regular_file(dir.file("a/b")));
  EXPECT_THROW(files::create_directories(dir.file("a/z/under-a-file")), IoError);
  EXPECT_TRUE(files::remove_all(dir.file("a")));
  EXPECT_FALSE(files::exists(dir.file("a")));
  EXPECT_TRUE(files::remove_all(dir.file("a")));  // missing is fine
  EXPECT_THROW(files::list_directory(dir.file("a")), IoError);
}

// A link inside a tree is removed, never followed: what it points at stays.
TEST(Files, RemovingATreeNeverFollowsItsLinks) {
  test::TempDir dir;
  files::create_directories(dir.file("keep"));
  put_text(dir.file("keep/precious"), "data");
  files::create_directories(dir.file("tree"));
  ASSERT_EQ(::symlink(dir.file("keep").c_str(), dir.file("tree/link").c_str()), 0);
  ASSERT_EQ(::symlink(dir.file("keep").c_str(), dir.file("top-link").c_str()), 0);
  EXPECT_TRUE(files::remove_all(dir.file("tree")));
  EXPECT_TRUE(files::remove_all(dir.file("top-link") + "/"));  // a trailing slash does not follow it either
  EXPECT_FALSE(files::exists(dir.file("tree")));
  EXPECT_FALSE(files::exists(dir.file("top-link")));
  EXPECT_EQ(file_text(dir.file("keep/precious")), "data");
}

TEST(Files, CopiesRenamesResizesAndRefusesACopyOntoItself) {
  test::TempDir dir;
  put_text(dir.file("a"), "hello world");
  files::copy_file(dir.file("a"), dir.file("b"));
  EXPECT_EQ(file_text(dir.file("b")), "hello world");
  EXPECT_THROW(files::copy_file(dir.file("a"), dir.file("a")), IoError);
  EXPECT_EQ(file_text(dir.file("a")), "hello world");  // not emptied
  files::resize_file(dir.file("b"), 5);
  EXPECT_EQ(files::file_size(dir.file("b")), 5u);
  files::rename(dir.file("b"), dir.file("a"));
  EXPECT_EQ(file_text(dir.file("a")), "hello");
  EXPECT_FALSE(files::exists(dir.file("b")));
  EXPECT_THROW(files::file_size(dir.path()), IoError);
  EXPECT_TRUE(files::remove(dir.file("a")));
  EXPECT_FALSE(files::remove(dir.file("a")));
  EXPECT_THROW(files::rename(dir.file("a"), dir.file("c")), IoError);
}

// Missing is an answer; a loop of links is an error, as in std::filesystem.
TEST(Files, QueriesTellMissingFromBroken) {
  test::TempDir dir;
  EXPECT_FALSE(files::exists(dir.file("nothing")));
  EXPECT_FALSE(files::exists(dir.file("nothing/below")));
  ASSERT_EQ(::symlink(dir.file("l2").c_str(), dir.file("l1").c_str()), 0);
  ASSERT_EQ(::symlink(dir.file("l1").c_str(), dir.file("l2").c_str()), 0);
  EXPECT_THROW(files::exists(dir.file("l1")), IoError);
}

TEST(Files, ParentPaths) {
  EXPECT_EQ(files::parent_path("a/b"), "a");
  EXPECT_EQ(files::parent_path("a/b/"), "a");
  EXPECT_EQ(files::parent_path("a//b"), "a");
  EXPECT_EQ(files::parent_path("/a"), "/");
  EXPECT_EQ(files::parent_path("a"), "");
  EXPECT_EQ(files::parent_path(""), "");
  EXPECT_EQ(files::read_link("/proc/self/exe").empty(), false);
}

// Whole or not at all: the bytes arrive, no temporary file stays, and a
// write into a missing folder names the file and leaves nothing.
TEST(Files, AtomicWritesReplaceWholeAndLeaveNothingBehind) {
  test::TempDir dir;
  const std::string path = dir.file("a.json");
  put_text(path, "old");
  files::write_file_atomic(path, "new text", 8);
  EXPECT_EQ(file_text(path), "new text");
  EXPECT_EQ(files::list_directory(dir.path()), std::vector<std::string>{"a.json"});
  try {
    files::write_file_atomic(dir.file("missing/b.json"), "x", 1);
    ADD_FAILURE() << "written into a missing folder";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("missing/b.json"), std::string::npos) << e.what();
  }
  // The two halves: nothing at the target until the commit.
  const std::string temporary = files::write_temporary(path, "newer", 5);
  EXPECT_EQ(file_text(path), "new text");
  files::commit_file(temporary, path);
  EXPECT_EQ(file_text(path), "newer");
  EXPECT_FALSE(files::exists(temporary));
}

TEST(Files, OutputPathsAreCheckedBeforeARun) {
  test::TempDir dir;
  EXPECT_NO_THROW(files::check_writable_file(dir.file("out.json")));
  EXPECT_THROW(files::check_writable_file(dir.path()), IoError);                  // a folder
  EXPECT_THROW(files::check_writable_file(dir.file("no/such/out.json")), IoError);  // a missing folder
  EXPECT_THROW(files::check_writable_file("/proc/actkit-out.json"), IoError);
  // Checkpoint folders: made if missing, refused where no file can go.
  EXPECT_NO_THROW(files::check_writable_folder(dir.file("ckpt/a")));
  EXPECT_TRUE(files::is_directory(dir.file("ckpt/a")));
  EXPECT_TRUE(files::list_directory(dir.file("ckpt/a")).empty()) << "the probe is gone";
  put_text(dir.file("plain"), "x");
  EXPECT_THROW(files::check_writable_folder(dir.file("plain")), IoError);  // a file where a folder goes
  EXPECT_THROW(files::check_writable_folder("/proc"), IoError);
  EXPECT_THROW(files::check_writable_folder("/proc/actkit-ckpt"), IoError);
}

// A path the user named that is a device, a FIFO or a link is written
// through and stays what it was (before, the atomic write renamed a regular
// file over it: `--json /dev/null` as root replaced the system's
// /dev/null); the check before a run makes nothing beside it.
TEST(Files, OutputsThroughDevicesFifosAndLinksLeaveTheNodes) {
  test::TempDir dir;
  struct stat st;
  EXPECT_EQ(files::output_way("/dev/null"), files::OutputWay::kInPlace);
  EXPECT_NO_THROW(files::check_writable_file("/dev/null"));
  files::write_output_file("/dev/null", "{}\n", 3);
  ASSERT_EQ(::lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  for (const std::string& name : files::list_directory("/dev")) {
    EXPECT_NE(name.rfind("null.", 0), 0u) << "made beside /dev/null: " << name;
  }
  // /dev/stdout (a link): the bytes go out through this process's output.
  files::write_output_file("/dev/stdout", "\n", 1);
  ASSERT_EQ(::lstat("/dev/stdout", &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));

  // A link to a regular file: the link stays, its target holds the bytes.
  put_text(dir.file("target"), "old old old");
  ASSERT_EQ(::symlink(dir.file("target").c_str(), dir.file("link").c_str()), 0);
  EXPECT_NO_THROW(files::check_writable_file(dir.file("link")));
  files::write_output_file(dir.file("link"), "new", 3);
  ASSERT_EQ(::lstat(dir.file("link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(file_text(dir.file("target")), "new");
  EXPECT_EQ(files::list_directory(dir.path()), (std::vector<std::string>{"link", "target"}));

  // A FIFO with a reader: the reader gets the bytes, the FIFO stays. Without
  // one: an error at once, not a wait for a reader.
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(files::write_output_file(fifo, "x", 1), IoError);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  files::write_output_file(fifo, "through", 7);
  char got[16] = {};
  EXPECT_EQ(::read(reader, got, sizeof got), 7);
  ::close(reader);
  EXPECT_EQ(std::string(got), "through");
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));

  // Refused, and left as they were: a link to nothing, a socket, a folder.
  ASSERT_EQ(::symlink(dir.file("nothing").c_str(), dir.file("dangling").c_str()), 0);
  EXPECT_THROW(files::write_output_file(dir.file("dangling"), "x", 1), IoError);
  EXPECT_FALSE(files::exists(dir.file("nothing")));
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string socket_path = dir.file("sock");
  ASSERT_LT(socket_path.size(), sizeof address.sun_path);
  std::strcpy(address.sun_path, socket_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_THROW(files::check_writable_file(socket_path), IoError);
  EXPECT_THROW(files::write_output_file(socket_path, "x", 1), IoError);
  ::close(sock);
  EXPECT_THROW(files::write_output_file(dir.path(), "x", 1), IoError);
}

// One run per folder: a second claim is refused naming the holder, and the
// folder is free again once the first lets go.
TEST(Files, AFolderLockRefusesASecondRun) {
  test::TempDir dir;
  const std::string folder = dir.file("save");
  {
    files::FolderLock first(folder);
    try {
      files::FolderLock second(folder);
      ADD_FAILURE() << "two runs held one folder";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(::getpid())), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(files::FolderLock again(folder));
}

}  // namespace
}  // namespace actkit

// Private folders are new each time, this user's alone, and never a link
// someone planted under a guessable name.
TEST(Files, PrivateFoldersAreNewAndOwnedByThisUserAlone) {
  test::TempDir dir;
  const std::string a = files::make_private_directory(dir.path(), "run");
  const std::string b = files::make_private_directory(dir.path(), "run");
  EXPECT_NE(a, b);
  struct stat st {};
  ASSERT_EQ(::lstat(a.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_THROW(files::make_private_directory(dir.file("no-such-parent"), "run"), IoError);
}
