#include "train/train_options.h"

namespace gpipe::train {

void add_train_flags(CLI::App& app, TrainOptions& o) {
  app.add_option("--model", o.model, "mlp | sleep")->capture_default_str()->group("Model");
  app.add_option("--layers", o.layers, "number of layers (mlp: hidden layers)")
      ->capture_default_str()
      ->group("Model");
  app.add_option("--width", o.width, "mlp hidden width")->capture_default_str()->group("Model");
  app.add_option("--in-features", o.in_features, "mlp/sleep input features")
      ->capture_default_str()
      ->group("Model");
  app.add_option("--classes", o.classes, "number of classes")
      ->capture_default_str()
      ->group("Model");
  app.add_option("--layer-ms", o.layer_ms, "sleep model: forward ms per layer (backward 2x)")
      ->capture_default_str()
      ->group("Model");
  app.add_option("--dropout", o.dropout, "dropout probability")
      ->capture_default_str()
      ->group("Model");

  app.add_option("--partitions,-K", o.partitions, "number of stages K (auto-balanced)")
      ->group("Pipeline");
  app.add_option("--balance", o.balance, "layers per stage, e.g. 3,3,2 (sets K)")
      ->group("Pipeline");
  app.add_option("--balance-by", o.balance_by, "params | time | memory (with --partitions)")
      ->capture_default_str()
      ->group("Pipeline");
  app.add_option("--chunks,-M", o.chunks, "micro-batches per mini-batch")
      ->capture_default_str()
      ->group("Pipeline");
  app.add_option("--checkpoint", o.checkpoint, "re-materialisation: always | except_last | never")
      ->capture_default_str()
      ->group("Pipeline");
  app.add_option("--schedule", o.schedule, "gpipe | 1f1b")
      ->capture_default_str()
      ->group("Pipeline");
  app.add_option("--devices", o.devices, "one per stage: cpu:0,cpu:1 or cuda:0,cuda:1")
      ->group("Pipeline");
  app.add_option("--threads-per-device", o.threads_per_device,
                 "intra-op threads per device (0: 1 when K > 1, all cores when K = 1)")
      ->capture_default_str()
      ->group("Pipeline");

  app.add_flag("--distributed", o.distributed,
               "one stage per process over c10d; world = K stages x R replicas, rank = replica*K + "
               "stage (start with scripts/launch.sh)")
      ->group("Distributed");
  app.add_option("--comm-timeout", o.comm_timeout,
                 "seconds to wait for a peer before declaring it lost")
      ->capture_default_str()
      ->group("Distributed");

  app.add_option("--batch-size", o.batch_size, "mini-batch size N")
      ->capture_default_str()
      ->group("Training");
  app.add_option("--steps", o.steps, "training steps")->capture_default_str()->group("Training");
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str()->group("Training");
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->capture_default_str()
      ->group("Training");
  app.add_option("--seed", o.seed, "seed of data, initialisation and dropout")
      ->capture_default_str()
      ->group("Training");

  app.add_option("--trace", o.trace, "write the last step's timeline as Chrome trace JSON")
      ->group("Output");
  app.add_option("--json", o.json, "write a JSON summary")->group("Output");
  app.add_option("--log-every", o.log_every, "log every N steps")
      ->capture_default_str()
      ->group("Output");
}

}  // namespace gpipe::train
