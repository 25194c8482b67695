#include "coordinator/cli/checkpoint_table.h"

#include "gtest/gtest.h"

namespace mtrain {
namespace {

TEST(CheckpointTableTest, OneRowPerCheckpoint) {
  ListCheckpointsResponse response;
  CheckpointInfo* init = response.add_checkpoints();
  init->set_step(0);
  init->set_created_unix_seconds(0);
  init->set_tensor(1);
  init->set_pipeline(1);
  init->set_data(1);
  init->set_num_files(1);
  init->set_num_tensors(16);
  init->set_total_bytes(3 * 1024 * 1024 + 200 * 1024);
  init->set_parameters_only(true);
  CheckpointInfo* full = response.add_checkpoints();
  full->set_step(120);
  full->set_created_unix_seconds(3600);
  full->set_tensor(2);
  full->set_pipeline(2);
  full->set_data(2);
  full->set_num_files(4);
  full->set_num_tensors(48);
  full->set_total_bytes(900);
  EXPECT_EQ(FormatCheckpointTable(response, absl::UTCTimeZone()),
            "STEP      CREATED              LAYOUT(t,p,d)  FILES  TENSORS        SIZE  KIND\n"
            "0         1970-01-01 00:00:00  1,1,1              1       16     3.2 MiB  weights\n"
            "120       1970-01-01 01:00:00  2,2,2              4       48       900 B  full\n");
}

TEST(CheckpointTableTest, SaysWhenThereAreNone) {
  EXPECT_EQ(FormatCheckpointTable(ListCheckpointsResponse(), absl::UTCTimeZone()),
            "no checkpoints yet\n");
}

TEST(CheckpointTableTest, FormatsBytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(5ull << 30), "5.0 GiB");
}

}  // namespace
}  // namespace mtrain
