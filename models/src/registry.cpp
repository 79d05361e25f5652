// make_model: ModelConfig -> the builder of the named model.
#include "gpipe/models/registry.h"

#include "gpipe/errors.h"
#include "gpipe/models/amoebanet.h"
#include "gpipe/models/mlp.h"
#include "gpipe/models/sleep.h"
#include "gpipe/models/transformer.h"

namespace gpipe::models {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"mlp", "sleep", "amoebanet-d", "amoebanet-b",
                                              "transformer-l"};
  return names;
}

std::unique_ptr<ModelBuilder> make_model(const ModelConfig& c) {
  if (c.name == "amoebanet-d" || c.name == "amoebanet-b") {
    return std::make_unique<AmoebaNetBuilder>(
        AmoebaNetOptions(c.layers, c.filters)
            .genotype(c.name == "amoebanet-d" ? amoebanet_d_genotype() : amoebanet_b_genotype())
            .classes(c.classes)
            .image_size(c.image_size)
            .channels(c.channels)
            .stem_stride(c.stem_stride)
            .dropout(c.dropout)
            .drop_path(c.drop_path)
            .init_seed(c.init_seed));
  }
  if (c.name == "transformer-l") {
    return std::make_unique<TransformerBuilder>(TransformerOptions(c.layers)
                                                    .d_model(c.d_model)
                                                    .ffn(c.ffn)
                                                    .heads(c.heads)
                                                    .vocab(c.vocab)
                                                    .seq_len(c.seq_len)
                                                    .dropout(c.dropout)
                                                    .init_seed(c.init_seed));
  }
  if (c.name == "mlp") {
    return std::make_unique<MlpBuilder>(MlpOptions(c.in_features, c.width, c.layers, c.classes)
                                            .dropout(c.dropout)
                                            .batch_norm(c.batch_norm),
                                        c.init_seed);
  }
  if (c.name == "sleep") {
    return std::make_unique<SleepBuilder>(SleepOptions(c.layers, c.layer_ms), c.in_features,
                                          c.init_seed);
  }
  std::string known;
  for (const auto& name : model_names())
    known += (known.empty() ? "" : ", ") + name;
  throw ConfigError("unknown model '" + c.name + "'; known models: " + known);
}

SampleBatch sample_batch(const ModelConfig& config, int64_t batch_size, uint64_t seed) {
  return make_model(config)->sample_batch(batch_size, seed);
}

nlohmann::json to_json(const ModelConfig& m) {
  return {{"name", m.name},
          {"layers", m.layers},
          {"filters", m.filters},
          {"classes", m.classes},
          {"image_size", m.image_size},
          {"channels", m.channels},
          {"stem_stride", m.stem_stride},
          {"d_model", m.d_model},
          {"ffn", m.ffn},
          {"heads", m.heads},
          {"vocab", m.vocab},
          {"seq_len", m.seq_len},
          {"dropout", m.dropout},
          {"drop_path", m.drop_path},
          {"width", m.width},
          {"in_features", m.in_features},
          {"batch_norm", m.batch_norm},
          {"layer_ms", m.layer_ms}};
}

ModelConfig small_config(const std::string& name) {
  ModelConfig config;
  config.name = name;
  make_model(config);  // throws for an unknown name
  return config;
}

}  // namespace gpipe::models
