#include "base/flags.h"

#include <fmt/core.h>

#include <charconv>

namespace tally::base {

FlagSet::FlagSet(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void FlagSet::String(const std::string& name, std::string* target, const std::string& help) {
  flags_.push_back({name, Kind::kString, target, help, *target});
}
void FlagSet::Int(const std::string& name, int64_t* target, const std::string& help) {
  flags_.push_back({name, Kind::kInt, target, help, std::to_string(*target)});
}
void FlagSet::Bool(const std::string& name, bool* target, const std::string& help) {
  flags_.push_back({name, Kind::kBool, target, help, *target ? "true" : "false"});
}
void FlagSet::Repeated(const std::string& name, std::vector<std::string>* target,
                       const std::string& help) {
  std::string def;
  for (const auto& v : *target) def += (def.empty() ? "" : ",") + v;
  flags_.push_back({name, Kind::kRepeated, target, help, def});
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (auto& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagSet::WasSet(const std::string& name) const {
  for (const auto& f : flags_) {
    if (f.name == name) return f.set;
  }
  return false;
}

Status FlagSet::Parse(int argc, char** argv, bool* help) {
  *help = false;
  for (int i = 0; i < argc; i++) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      *help = true;
      return Status::Ok();
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* f = Find(name);
    if (!f) return Status::InvalidArgument(fmt::format("unknown flag --{} (see {} --help)", name, command_));
    if (f->kind == Kind::kBool) {
      bool v = true;
      if (has_value) {
        if (value == "true" || value == "1") v = true;
        else if (value == "false" || value == "0") v = false;
        else return Status::InvalidArgument(fmt::format("--{} expects true or false, got '{}'", name, value));
      }
      *static_cast<bool*>(f->target) = v;
      f->set = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) return Status::InvalidArgument(fmt::format("--{} needs a value", name));
      value = argv[++i];
    }
    switch (f->kind) {
      case Kind::kString:
        *static_cast<std::string*>(f->target) = value;
        break;
      case Kind::kInt: {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (ec != std::errc() || p != value.data() + value.size()) {
          return Status::InvalidArgument(fmt::format("--{} expects an integer, got '{}'", name, value));
        }
        *static_cast<int64_t*>(f->target) = v;
        break;
      }
      case Kind::kRepeated: {
        auto* vec = static_cast<std::vector<std::string>*>(f->target);
        if (!f->set) vec->clear();  // an explicit value replaces the default
        vec->push_back(value);
        break;
      }
      case Kind::kBool:
        break;
    }
    f->set = true;
  }
  return Status::Ok();
}

std::string FlagSet::Usage() const {
  std::string out = fmt::format("usage: {} [flags]\n\n{}\n\nflags:\n", command_, summary_);
  for (const auto& f : flags_) {
    std::string lhs = "--" + f.name;
    if (f.kind != Kind::kBool) lhs += f.kind == Kind::kInt ? " N" : " VALUE";
    out += fmt::format("  {:<26} {}", lhs, f.help);
    if (!f.default_text.empty() && f.default_text != "false") out += fmt::format(" (default {})", f.default_text);
    if (f.kind == Kind::kRepeated) out += " [repeatable]";
    out += "\n";
  }
  out += fmt::format("  {:<26} {}\n", "--help", "show this help");
  return out;
}

}  // namespace tally::base
