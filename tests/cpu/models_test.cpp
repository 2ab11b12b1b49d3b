// The model zoo: parameter counts, input sizes, flatness, and a few CPU training steps.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>

#include <echelon/autograd/functions.h>
#include <echelon/layers/init.h>
#include <echelon/layers/layers.h>
#include <echelon/layers/models/registry.h>
#include <echelon/layers/optim.h>
#include <echelon/tensor/ops.h>

using namespace echelon;

namespace {
// Trains on one small fixed random batch and returns the losses (memorising must lower them).
std::vector<float> train_steps(const std::string& name, int64_t channels, int64_t size,
                               int64_t batch, int steps, double lr) {
  auto net = make_model(name, channels, 10, 7, size);
  Generator gen(11);
  Tensor x = ops::randn({batch, channels, size, size}, gen);
  Tensor y = ops::randperm(batch, gen);  // distinct labels in [0, batch)
  SGD sgd(net->named_parameters(), {.lr = lr, .momentum = 0.9});
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    sgd.zero_grad();
    Tensor loss = cross_entropy(net->forward(x), y);
    losses.push_back(loss.item<float>());
    backward(loss);
    sgd.step();
  }
  return losses;
}
}  // namespace

TEST_SUITE("models") {
  TEST_CASE("parameter counts") {
    // Hand-derived: LeNet-5 156 + 2416 + 48120 + 10164 + 850; ResNet-20 with option-A shortcuts
    // (He et al. 2016, 0.27M); each model is built once (VGG-16 initialisation is not free).
    const std::map<std::string, int64_t> expected = {
        {"lenet5", 61706},      {"alexnet", 1756426}, {"vgg16", 14719818},
        {"vgg16_bn", 14728266}, {"resnet20", 269722}, {"resnet32", 464154},
        {"resnet44", 658586},   {"resnet56", 853018}, {"resnet110", 1727962}};
    REQUIRE(list_models().size() == expected.size());
    for (const ModelInfo& info : list_models()) {
      CAPTURE(info.name);
      REQUIRE(expected.count(info.name) == 1);
      const int64_t channels = info.name == "lenet5" ? 1 : 3;
      CHECK(make_model(info.name, channels, 10, 0)->num_parameters() == expected.at(info.name));
      CHECK(info.reference_parameters == expected.at(info.name));
    }
  }

  TEST_CASE("unknown names list the known ones") {
    CHECK_THROWS_WITH_AS(make_model("resnet18", 3, 10, 0), doctest::Contains("resnet20"), Error);
    CHECK_THROWS_AS(make_model("lenet5", 1, 10, 0, 30), Error);
    CHECK_THROWS_AS(make_model("lenet5", 0, 10, 0), Error);
  }

  TEST_CASE("same seed, same model") {
    auto a = make_model("alexnet", 3, 10, 5), b = make_model("alexnet", 3, 10, 5);
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      CHECK(ops::amax(ops::abs(ops::sub(pa[i], pb[i]))).item<float>() == 0.0f);
    }
  }

  TEST_CASE("init::SkipGuard builds the same shapes with zeros, drawing nothing") {
    auto drawn = make_model("vgg16", 3, 10, 5);
    std::shared_ptr<Sequential> skipped;
    {
      const init::SkipGuard outer;
      const init::SkipGuard nested;
      skipped = make_model("vgg16", 3, 10, 5);
    }
    CHECK_FALSE(init::SkipGuard::active());
    auto pd = drawn->parameters(), ps = skipped->parameters();
    REQUIRE(pd.size() == ps.size());
    for (size_t i = 0; i < pd.size(); ++i) {
      CHECK(ps[i].shape() == pd[i].shape());
      CHECK(ops::amax(ops::abs(ps[i])).item<float>() == 0.0f);
    }
    // The guard ends with its scope: the next model is drawn again, from the same seed.
    auto again = make_model("vgg16", 3, 10, 5)->parameters();
    CHECK(ops::amax(ops::abs(ops::sub(again[0], pd[0]))).item<float>() == 0.0f);
    CHECK(ops::amax(ops::abs(again[0])).item<float>() > 0.0f);
  }

  TEST_CASE("models accept 28x28 and 32x32 and are flat Sequentials") {
    Generator gen(2);
    NoGradGuard no_grad;
    for (const char* name : {"lenet5", "alexnet", "vgg16", "resnet20"}) {
      for (int64_t size : {28, 32}) {
        const int64_t channels = size == 28 ? 1 : 3;
        CAPTURE(name);
        CAPTURE(size);
        auto net = make_model(name, channels, 7, 1, size);
        net->eval();
        CHECK(net->forward(ops::randn({2, channels, size, size}, gen)).shape() == Shape{2, 7});
        for (const auto& layer : net->layers()) CHECK(layer->name() != "Sequential");
      }
    }
  }

  TEST_CASE("CPU training steps lower the loss") {
    struct Case {
      std::string name;
      int64_t channels, size, batch;
      int steps;
      double lr;
    };
    for (const Case& c : {Case{"lenet5", 1, 28, 8, 12, 0.05}, Case{"alexnet", 3, 32, 6, 12, 0.02},
                          Case{"resnet20", 3, 16, 8, 8, 0.05}}) {
      CAPTURE(c.name);
      std::vector<float> losses = train_steps(c.name, c.channels, c.size, c.batch, c.steps, c.lr);
      for (float l : losses) CHECK(std::isfinite(l));
      CHECK(losses.back() < 0.9f * losses.front());
    }
  }

  TEST_CASE("deep ResNets: forward and backward shapes") {
    Generator gen(9);
    for (const char* name : {"resnet56", "resnet110"}) {
      CAPTURE(name);
      auto net = make_model(name, 3, 10, 1);
      Tensor x = ops::randn({2, 3, 8, 8}, gen);
      x.set_requires_grad(true);
      Tensor loss = cross_entropy(net->forward(x), Tensor::from_vector<int64_t>({3, 8}, {2}));
      backward(loss);
      CHECK(x.grad().shape() == x.shape());
      // Named copies, not structured bindings: clang 14 cannot capture those in CAPTURE's lambda.
      for (const auto& named : net->named_parameters()) {
        const std::string& pname = named.first;
        const Tensor& p = named.second;
        CAPTURE(pname);
        REQUIRE(p.grad().defined());
        CHECK(p.grad().shape() == p.shape());
      }
    }
  }
}

// VGG-16 and the deep ResNets take seconds per step on CPU even on 8x8 inputs: kept out of the
// default run (ctest runs them as `cpu_slow`).
TEST_SUITE("slow_models") {
  TEST_CASE("vgg16 CPU training steps lower the loss") {
    std::vector<float> losses = train_steps("vgg16", 3, 8, 4, 8, 0.05);
    for (size_t i = 1; i < losses.size(); ++i) CHECK(losses[i] < losses[i - 1]);
    CHECK(losses.back() < 0.95f * losses.front());
  }

  TEST_CASE("deep ResNets: CPU training steps lower the loss") {
    for (const char* name : {"resnet56", "resnet110"}) {
      CAPTURE(name);
      std::vector<float> losses = train_steps(name, 3, 8, 4, 8, 0.01);
      for (float l : losses) CHECK(std::isfinite(l));
      CHECK(losses.back() < 0.9f * losses.front());
    }
  }
}
