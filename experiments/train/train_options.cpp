#include "train/train_options.h"

namespace gpipe::train {

void add_train_flags(CLI::App& app, TrainOptions& o) {
  auto& m = o.model;
  const char* model = "Model";
  app.add_option("--model", m.name, "mlp | sleep | amoebanet-d | amoebanet-b | transformer-l")
      ->capture_default_str()
      ->group(model);
  app.add_option("--layers", m.layers,
                 "AmoebaNet: normal cells L; Transformer-L: layers; mlp: hidden layers")
      ->capture_default_str()
      ->group(model);
  app.add_option("--filters", m.filters, "AmoebaNet: filters D (a multiple of 16)")
      ->capture_default_str()
      ->group(model);
  app.add_option("--classes", m.classes, "output classes")->capture_default_str()->group(model);
  app.add_option("--image-size", m.image_size, "AmoebaNet input size (square)")
      ->capture_default_str()
      ->group(model);
  app.add_option("--channels", m.channels, "AmoebaNet input channels")
      ->capture_default_str()
      ->group(model);
  app.add_option("--d-model", m.d_model, "Transformer-L model dimension")
      ->capture_default_str()
      ->group(model);
  app.add_option("--ffn", m.ffn, "Transformer-L feed-forward dimension")
      ->capture_default_str()
      ->group(model);
  app.add_option("--heads", m.heads, "Transformer-L attention heads")
      ->capture_default_str()
      ->group(model);
  app.add_option("--vocab", m.vocab, "Transformer-L vocabulary")->capture_default_str()->group(model);
  app.add_option("--seq-len", m.seq_len, "Transformer-L sequence length")
      ->capture_default_str()
      ->group(model);
  app.add_option("--dropout", m.dropout, "dropout probability")->capture_default_str()->group(model);
  app.add_option("--drop-path", m.drop_path, "AmoebaNet drop-path probability")
      ->capture_default_str()
      ->group(model);
  app.add_option("--width", m.width, "mlp hidden width")->capture_default_str()->group(model);
  app.add_option("--in-features", m.in_features, "mlp/sleep input features")
      ->capture_default_str()
      ->group(model);
  app.add_option("--layer-ms", m.layer_ms, "sleep model: forward ms per layer (backward 2x)")
      ->capture_default_str()
      ->group(model);

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
