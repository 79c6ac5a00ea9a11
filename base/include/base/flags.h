// A small command-line flag parser for the tally subcommands.
//
// Flags are "--name VALUE" or "--name=VALUE"; booleans are "--name" or
// "--name=true|false". Every flag has a help line; Usage() renders them for
// `tally CMD --help`. Thread model: externally synchronized; used once at
// start-up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tally::base {

class FlagSet {
 public:
  // `command` is shown in usage ("tally up"); `summary` is one paragraph.
  FlagSet(std::string command, std::string summary);

  // Registers a flag bound to `*target`, whose current value is the default.
  // `target` must outlive Parse().
  void String(const std::string& name, std::string* target, const std::string& help);
  void Int(const std::string& name, int64_t* target, const std::string& help);
  void Bool(const std::string& name, bool* target, const std::string& help);
  // May be given several times; each value is appended.
  void Repeated(const std::string& name, std::vector<std::string>* target, const std::string& help);

  // Parses argv[0..argc). Sets *help when --help or -h is seen (and stops).
  // InvalidArgument naming the flag for an unknown flag, a missing value or a
  // malformed number; nothing is guaranteed about targets then.
  Status Parse(int argc, char** argv, bool* help);

  // Arguments that are not flags, in order.
  const std::vector<std::string>& positional() const { return positional_; }

  // True if the flag was given explicitly on the command line.
  bool WasSet(const std::string& name) const;

  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kBool, kRepeated };
  struct Flag {
    std::string name;
    Kind kind;
    void* target;
    std::string help;
    std::string default_text;
    bool set = false;
  };
  Flag* Find(const std::string& name);

  std::string command_;
  std::string summary_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
};

}  // namespace tally::base
