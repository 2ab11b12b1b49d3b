// See parse_error.h.
#include <echelon/app/cli/parse_error.h>

#include <algorithm>
#include <cctype>
#include <vector>

#include <echelon/base/error.h>

namespace echelon::app {

namespace {

// The deepest subcommand argv names ("bench" then "op"), and its words ("echelon bench op").
struct Active {
  const CLI::App* app;
  std::string path;
};

Active active_subcommand(const CLI::App& root, int argc, const char* const* argv) {
  Active active{&root, "echelon"};
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;  // launch: the ranks' command follows
    if (word.empty() || word[0] == '-') continue;
    for (const CLI::App* sub : active.app->get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == word) {
        active = {sub, active.path + " " + word};
        break;
      }
  }
  return active;
}

std::string subcommand_names(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

// "--name" of a word "--name=value" (or "-x").
std::string flag_name(const std::string& word) {
  return word.substr(0, word.find('='));
}

bool is_flag_word(const std::string& word) {
  // A negative number ("--lr -1") is a value, not a flag.
  return word.size() > 1 && word[0] == '-' &&
         !(std::isdigit(static_cast<unsigned char>(word[1])) || word[1] == '.');
}

// The first flag in argv that `app` does not know.
std::string unknown_flag(const CLI::App& app, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    if (!is_flag_word(word)) continue;
    if (app.get_option_no_throw(flag_name(word)) == nullptr) return flag_name(word);
  }
  return "";
}

// The known long flag nearest to `flag`, when near enough to be a typo; else "".
std::string nearest_flag(const CLI::App& app, const std::string& flag) {
  if (flag.size() > 64) return "";  // no typo of a known flag; keeps the cost bounded (fuzzing)
  std::string best;
  size_t best_distance = std::string::npos;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) {
      const std::string candidate = "--" + name;
      const size_t d = edit_distance(flag, candidate);
      // A prefix ("--epoch" of "--epochs", "--nproc" of "--nproc-per-node") counts as near too.
      const bool prefix = flag.size() >= 4 && candidate.rfind(flag, 0) == 0;
      const size_t score = prefix ? 1 : d;
      if (score < best_distance) {
        best_distance = score;
        best = candidate;
      }
    }
  }
  return best_distance <= std::max<size_t>(2, flag.size() / 4) ? best : "";
}

// "Could not convert: --epochs = 1.5" -> the flag and the value.
bool split_conversion(const std::string& what, std::string& flag, std::string& value) {
  const std::string head = "Could not convert: ";
  if (what.rfind(head, 0) != 0) return false;
  const size_t eq = what.find(" = ", head.size());
  if (eq == std::string::npos) return false;
  flag = what.substr(head.size(), eq - head.size());
  value = what.substr(eq + 3);
  return true;
}

std::string expected_kind(const CLI::Option* option) {
  if (option == nullptr) return "a valid value";
  const std::string type = option->get_type_name();
  if (type == "UINT") return "a whole number >= 0";
  if (type == "INT") return "a whole number";
  if (type == "FLOAT") return "a number";
  return "a valid value";
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: a swapped pair of letters ("--modle") costs 1, as a user sees it.
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string explain_parse_error(const CLI::App& root, const CLI::ParseError& error, int argc,
                                const char* const* argv) {
  const Active active = active_subcommand(root, argc, argv);
  const std::string see = " (see " + active.path + " --help)";
  const std::string what = error.what();
  // "echelon train: ..." names the subcommand; the top level needs no name ("echelon: error:").
  const std::string who = active.app == &root ? "" : active.path + ": ";
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    const std::string flag = unknown_flag(*active.app, argc, argv);
    if (!flag.empty()) {
      const std::string near = nearest_flag(*active.app, flag);
      return str(who, "unknown flag ", flag,
                 near.empty() ? std::string() : "; did you mean " + near + "?", see);
    }
    return str(who, what, see);
  }
  if (dynamic_cast<const CLI::ConversionError*>(&error) != nullptr) {
    std::string flag, value;
    if (split_conversion(what, flag, value))
      return str(flag, ": '", value, "' is not ",
                 expected_kind(active.app->get_option_no_throw(flag)), see);
  }
  if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr &&
      what.rfind("A subcommand", 0) == 0) {
    const std::string flag = unknown_flag(*active.app, argc, argv);  // "echelon --trian"
    if (!flag.empty())
      return str(who, "unknown flag ", flag,
                 "; give a subcommand first: ", subcommand_names(*active.app), see);
    return str(who, "give a subcommand: ", subcommand_names(*active.app), see);
  }
  if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr) return str(who, what, see);
  return str(what, see);  // a flag's own check: the message names the flag
}

}  // namespace echelon::app
