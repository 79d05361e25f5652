// World: what the layers above the engine need from the other processes of a run.
//
// Why this file exists: the trainer and the snapshot manager must know who they are (which
// rank reports, which replica saves) and agree with the others on a few numbers (evaluation
// counts, memory peaks) and moments (a snapshot written by every stage), but should not
// know c10d or test for "is this distributed" at every turn. They hold a World: the
// single-process one answers rank 0 of a world of one and does nothing;
// distributed::Context answers over its process groups, turning a lost peer into the
// DistributedError that names it, in evaluation as in training.
#pragma once

#include <cstdint>
#include <vector>

namespace gpipe {

class World {
 public:
  virtual ~World() = default;
  virtual int rank() const { return 0; }
  // This rank's position in its pipeline: its device, which holds one stage or, under a V or
  // interleaved schedule, several.
  virtual int64_t device() const { return 0; }
  virtual int64_t replica() const { return 0; }
  virtual int64_t replicas() const { return 1; }
  // Sums each of `values` over every rank of the world.
  virtual std::vector<double> sum_over_world(const std::vector<double>& values) { return values; }
  // Returns once every rank has called it.
  virtual void barrier() {}
};

// The world of one process (rank 0, one replica); nothing to wait for.
inline World& single_process_world() {
  static World world;
  return world;
}

}  // namespace gpipe
