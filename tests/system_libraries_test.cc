// Proves that every Debian library the workspace wraps links and works from a project
// binary: the build's contract with the machine, checked by doing one real thing with each.
#include <cblas.h>
#include <cublasLt.h>
#include <nccl.h>
#include <oneapi/dnnl/dnnl.h>
#include <sqlite3.h>

#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gloo/allreduce_ring.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/transport/tcp/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace mtrain {
namespace {

TEST(SystemLibrariesTest, OpenBlasMultipliesMatrices) {
  // [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50]
  const float a[] = {1, 2, 3, 4};
  const float b[] = {5, 6, 7, 8};
  float c[4] = {0};
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  EXPECT_THAT(c, testing::ElementsAre(19, 22, 43, 50));
}

TEST(SystemLibrariesTest, OneDnnMultipliesMatrices) {
  const float a[] = {1, 2, 3, 4};
  const float b[] = {5, 6, 7, 8};
  float c[4] = {0};
  ASSERT_EQ(dnnl_sgemm('N', 'N', 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2), dnnl_success);
  EXPECT_THAT(c, testing::ElementsAre(19, 22, 43, 50));
}

TEST(SystemLibrariesTest, SqliteStoresAndQueries) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE jobs(id TEXT PRIMARY KEY, steps INT);"
                         "INSERT INTO jobs VALUES('a', 3), ('b', 4);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT SUM(steps) FROM jobs", -1, &statement, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(statement), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(statement, 0), 7);
  sqlite3_finalize(statement);
  sqlite3_close(db);
}

TEST(SystemLibrariesTest, PrometheusSerializesTextFormat) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter()
                     .Name("mtrain_test_events_total")
                     .Help("Events seen by the test.")
                     .Register(*registry);
  family.Add({{"job", "j1"}}).Increment(3);
  const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_THAT(text, testing::HasSubstr("# TYPE mtrain_test_events_total counter"));
  EXPECT_THAT(text, testing::HasSubstr("mtrain_test_events_total{job=\"j1\"} 3"));
}

constexpr int kWorld = 2;
constexpr int kCount = 1000;

TEST(SystemLibrariesTest, GlooAllReducesAcrossTwoRanksOverLoopbackTcp) {
  gloo::rendezvous::HashStore store;
  std::vector<std::vector<float>> data(kWorld, std::vector<float>(kCount));
  for (int rank = 0; rank < kWorld; ++rank) {
    for (int i = 0; i < kCount; ++i) data[rank][i] = static_cast<float>(i * (rank + 1));
  }
  // Each rank's context outlives every rank's thread: a rank that finished first would
  // otherwise close its connections while its peer still drains the last message, and
  // this 2022 Gloo then fails the peer with "Connection closed by peer".
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts(kWorld);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([rank, &store, &data, &contexts, &errors] {
      try {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto device = gloo::transport::tcp::CreateDevice(attr);
        contexts[rank] = std::make_shared<gloo::rendezvous::Context>(rank, kWorld);
        contexts[rank]->connectFullMesh(store, device);
        std::vector<float*> buffers = {data[rank].data()};
        gloo::AllreduceRing<float> allreduce(contexts[rank], buffers, kCount);
        allreduce.run();
      } catch (const std::exception& error) {
        errors[rank] = error.what();
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int rank = 0; rank < kWorld; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
  for (int rank = 0; rank < kWorld; ++rank) {
    for (int i = 0; i < kCount; ++i) ASSERT_EQ(data[rank][i], 3.0f * i) << rank << " " << i;
  }
}

// Library-level calls that need no GPU: the CUDA libraries link and load here.
TEST(SystemLibrariesTest, CudaLibrariesLoadWithoutAGpu) {
  int nccl_version = 0;
  ASSERT_EQ(ncclGetVersion(&nccl_version), ncclSuccess);
  EXPECT_GE(nccl_version, 22800) << "NCCL 2.28 or newer is expected in /usr/local/cuda";
  EXPECT_GE(cublasLtGetVersion(), 130000u) << "cuBLASLt from CUDA 13 is expected";
}

}  // namespace
}  // namespace mtrain
