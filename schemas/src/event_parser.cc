// EventParser: simdjson on-demand, one pass over the event object.
//
// The verdict must equal python-jsonschema's on schemas/json/ (the
// conformance test checks it). Three consequences shape this file:
//   - The type may come after the other fields, so each known field is read
//     into a slot with its own verdict ("problem"); only once the type is
//     known are the problems of the fields that type uses reported. A field
//     the type does not use is ignored even when its value is wrong, exactly
//     as a JSON Schema without additionalProperties:false ignores it.
//   - On-demand parsing skips what it is not asked for, but an ignored value
//     must still be valid JSON, so every ignored value is walked (Skip*):
//     strings unescaped, numbers checked against the JSON grammar, literals
//     matched, duplicate keys detected in every object.
//   - Numbers follow JSON Schema's "integer": an integral value written 5.0
//     or 5e0 is an integer; true is not.
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "json_text.h"
#include "schemas/event.h"

namespace tally::schemas {
namespace {

namespace od = simdjson::ondemand;
using base::Status;

// The fields of SPEC section 1 that some event type uses.
enum class Field : uint8_t {
  kType = 0,
  kTs,
  kId,
  kPostId,
  kUserId,
  kAuthorId,
  kTargetId,
  kFromUserId,
  kToUserId,
  kNoticeId,
  kTargetIds,
  kTitle,
  kChannel,
  kKind,
  kSnapshot,
};
constexpr int kFieldCount = 15;

constexpr std::string_view kFieldNames[kFieldCount] = {
    "type",       "ts",        "id",           "post_id",    "user_id",
    "author_id",  "target_id", "from_user_id", "to_user_id", "notice_id",
    "target_ids", "title",     "channel",      "kind",       "snapshot",
};

constexpr uint32_t Bit(Field f) { return 1u << static_cast<int>(f); }

// Returns false if `key` names no known field.
bool LookupField(std::string_view key, Field* out) {
  for (int i = 0; i < kFieldCount; ++i) {
    if (key == kFieldNames[i]) {
      *out = static_cast<Field>(i);
      return true;
    }
  }
  return false;
}

// Why the value of a present field does not satisfy its schema.
enum class Problem : uint8_t {
  kNone = 0,
  kNotString,
  kNotInteger,
  kNotId,
  kIdOutOfRange,
  kTsOutOfRange,
  kCountOutOfRange,
  kMalformedIdString,
  kNotArray,
  kItemCount,
  kNotObject,
  kTooManyEntries,
  kBadSnapshotKey,
  kTitleTooLong,
  kBadChannel,
  kBadEventId,
  kUnknownKind,
};

const char* ProblemText(Problem p) {
  switch (p) {
    case Problem::kNone:
      return "ok";
    case Problem::kNotString:
      return "expected a string";
    case Problem::kNotInteger:
      return "expected an integer";
    case Problem::kNotId:
      return "expected an id (integer or decimal string)";
    case Problem::kIdOutOfRange:
      return "id out of range 1..9223372036854775807";
    case Problem::kTsOutOfRange:
      return "out of range 0..253402300799999";
    case Problem::kCountOutOfRange:
      return "count out of range 0..9223372036854775807";
    case Problem::kMalformedIdString:
      return "not a canonical decimal id";
    case Problem::kNotArray:
      return "expected an array of ids";
    case Problem::kItemCount:
      return "expected 1..100 ids";
    case Problem::kNotObject:
      return "expected an object";
    case Problem::kTooManyEntries:
      return "more than 10000 entries";
    case Problem::kBadSnapshotKey:
      return "is not a canonical decimal id";
    case Problem::kTitleTooLong:
      return "longer than 1024 characters";
    case Problem::kBadChannel:
      return "is not 1..64 characters of [a-z0-9_.-]";
    case Problem::kBadEventId:
      return "is not 1..64 printable ASCII characters";
    case Problem::kUnknownKind:
      return "unknown kind";
  }
  return "invalid";
}

// The integer ranges of schemas/json/defs.json.
struct IntRange {
  uint64_t min;
  uint64_t max;
  Problem out_of_range;
  Problem not_integer;
};
constexpr IntRange kIdRange = {1, kMaxId, Problem::kIdOutOfRange, Problem::kNotId};
constexpr IntRange kTsRange = {0, static_cast<uint64_t>(kMaxTs), Problem::kTsOutOfRange,
                               Problem::kNotInteger};
constexpr IntRange kCountRange = {0, kMaxId, Problem::kCountOutOfRange, Problem::kNotInteger};

// What a present field's value turned out to be.
struct Slot {
  bool present = false;
  Problem problem = Problem::kNone;
  // The target_ids element the problem is about, or -1.
  int32_t index = -1;
  // kBadSnapshotKey: the key; a snapshot value problem: its key;
  // kUnknownKind, kBadChannel, kBadEventId: the value. Points into the
  // parser's string buffer.
  std::string_view detail;
};

// The fields each type uses, in the order their problems are reported.
struct Rule {
  Field field;
  bool required;
};
constexpr Rule kCommonRules[] = {{Field::kTs, true}, {Field::kId, false}};
struct TypeRules {
  const Rule* rules;
  int count;
};

constexpr Rule kPostRules[] = {{Field::kAuthorId, true}, {Field::kPostId, true}};
constexpr Rule kEngageRules[] = {
    {Field::kPostId, true}, {Field::kUserId, true}, {Field::kAuthorId, false}};
constexpr Rule kUnlikeRules[] = {{Field::kPostId, true}, {Field::kUserId, true}};
constexpr Rule kViewRules[] = {{Field::kPostId, true}, {Field::kUserId, false}};
constexpr Rule kMentionRules[] = {{Field::kUserId, true}, {Field::kTargetIds, true}};
constexpr Rule kDmRules[] = {{Field::kFromUserId, true}, {Field::kToUserId, true}};
constexpr Rule kFollowRules[] = {{Field::kUserId, true}, {Field::kTargetId, true}};
constexpr Rule kNoticeRules[] = {{Field::kNoticeId, true}, {Field::kTitle, false}};
constexpr Rule kRedDotRules[] = {{Field::kChannel, true}};
// read.json validates notice_id, channel and snapshot whenever present; which
// of them is required depends on kind (checked after these rules).
constexpr Rule kReadRules[] = {{Field::kUserId, true},
                               {Field::kKind, true},
                               {Field::kNoticeId, false},
                               {Field::kChannel, false},
                               {Field::kSnapshot, false}};

template <size_t N>
constexpr TypeRules Rules(const Rule (&r)[N]) {
  return {r, static_cast<int>(N)};
}

TypeRules RulesFor(EventType type) {
  switch (type) {
    case EventType::kPost:
    case EventType::kPostDelete:
      return Rules(kPostRules);
    case EventType::kLike:
    case EventType::kRepost:
    case EventType::kComment:
      return Rules(kEngageRules);
    case EventType::kUnlike:
      return Rules(kUnlikeRules);
    case EventType::kView:
      return Rules(kViewRules);
    case EventType::kMention:
      return Rules(kMentionRules);
    case EventType::kDm:
      return Rules(kDmRules);
    case EventType::kFollow:
    case EventType::kUnfollow:
      return Rules(kFollowRules);
    case EventType::kNotice:
      return Rules(kNoticeRules);
    case EventType::kRedDot:
      return Rules(kRedDotRules);
    case EventType::kRead:
      return Rules(kReadRules);
  }
  return {nullptr, 0};
}

// A short, one-line description of a simdjson error.
const char* JsonErrorText(simdjson::error_code e) {
  switch (e) {
    case simdjson::EMPTY:
      return "empty input";
    case simdjson::UTF8_ERROR:
      return "invalid UTF-8";
    case simdjson::UNESCAPED_CHARS:
      return "unescaped control character in a string";
    case simdjson::UNCLOSED_STRING:
      return "unclosed string";
    case simdjson::STRING_ERROR:
      return "bad string escape or lone surrogate";
    case simdjson::NUMBER_ERROR:
      return "malformed number";
    case simdjson::T_ATOM_ERROR:
    case simdjson::F_ATOM_ERROR:
    case simdjson::N_ATOM_ERROR:
    case simdjson::INCORRECT_TYPE:
      return "malformed value";
    case simdjson::TAPE_ERROR:
      return "malformed structure";
    case simdjson::INCOMPLETE_ARRAY_OR_OBJECT:
      return "truncated or unbalanced object or array";
    case simdjson::DEPTH_ERROR:
      return "nesting too deep";
    case simdjson::CAPACITY:
    case simdjson::MEMALLOC:
      return "document too large";
    default:
      return simdjson::error_message(e);
  }
}

// True if the first non-whitespace byte of `json` starts a JSON value other
// than an object (so "not an object" is the better reason).
bool RootIsAnotherValue(std::string_view json) {
  const size_t i = json.find_first_not_of(" \t\n\r");
  if (i == std::string_view::npos) return false;
  const char c = json[i];
  if (c == 't' || c == 'f' || c == 'n') {
    // A literal only when it is spelled out and ends there: "this is not
    // json" is not JSON at all, and saying "not a JSON object" would mislead.
    const std::string_view rest = json.substr(i);
    for (std::string_view lit : {"true", "false", "null"}) {
      if (rest.substr(0, lit.size()) == lit) {
        const std::string_view after = rest.substr(lit.size());
        return after.empty() || std::string_view(" \t\n\r").find(after[0]) != std::string_view::npos;
      }
    }
    return false;
  }
  return c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9');
}

}  // namespace

struct EventParser::Impl {
  // The first buffers fit most events; both grow to twice their size or to
  // the input, whichever is larger.
  static constexpr size_t kMinBuffer = 4096;

  // Why the bytes are not a JSON document this parser accepts at all.
  enum class Fatal : uint8_t {
    kNone = 0,
    kJson,  // json_error
    kMalformedNumber,
    kTooDeep,
    kDuplicateKey,  // fatal_key
    kTrailing,
    kNotObject,
    kRootMalformed,
    kByteOrderMark,
  };

  Status Parse(std::string_view json, Event* out);

  // Each returns false after recording a fatal error; true otherwise (the
  // value may still carry a Problem, recorded in the slot).
  bool Json(simdjson::error_code e) {
    fatal = Fatal::kJson;
    json_error = e;
    return false;
  }
  bool Check(simdjson::error_code e) { return e == simdjson::SUCCESS || Json(e); }
  bool Fail(Fatal f) {
    fatal = f;
    return false;
  }

  bool SkipValue(od::value v, int depth);
  bool SkipObject(od::object o, int depth);
  // Sets *token to the number's text.
  bool CheckNumberSyntax(od::value v, std::string_view* token, internal::JsonNumber* kind);
  // Pushed keys [start, end) of one object: duplicates are fatal; pops them.
  bool CheckDuplicateKeys(size_t start);

  bool ReadInteger(od::value v, int depth, const IntRange& range, uint64_t* out, Problem* problem);
  bool ReadId(od::value v, int depth, uint64_t* out, Problem* problem);
  bool ReadString(od::value v, int depth, std::string_view* out, Problem* problem);
  bool ReadField(Field f, od::value v, Event* out);
  bool ReadTargetIds(od::value v, Event* out, Slot* slot);
  bool ReadSnapshot(od::value v, Event* out, Slot* slot);

  Status FatalStatus() const;
  Status SlotStatus(Field f) const;
  Status Finish(Event* out);

  od::parser parser;
  simdjson::padded_string buffer;  // grows only
  // Keys of the objects being walked, one frame per open object; the views
  // point into the parser's string buffer, valid until the next Parse().
  std::vector<std::string_view> keys;

  Fatal fatal = Fatal::kNone;
  simdjson::error_code json_error = simdjson::SUCCESS;
  std::string_view fatal_key;

  Slot slots[kFieldCount];
  uint64_t ids[kFieldCount] = {};
  int64_t ts = 0;
  std::string_view type_name;
  UnreadKind kind = UnreadKind::kMention;
};

bool EventParser::Impl::CheckNumberSyntax(od::value v, std::string_view* token,
                                          internal::JsonNumber* kind) {
  // On-demand parsing never looks at a number it is not asked for, and
  // simdjson's own number parser also rejects valid numbers it cannot
  // represent (2^64, 1e400): the grammar is checked here, once.
  *token = internal::TrimTrailingJsonWhitespace(v.raw_json_token());
  *kind = internal::ClassifyJsonNumber(*token);
  return *kind != internal::JsonNumber::kInvalid || Fail(Fatal::kMalformedNumber);
}

bool EventParser::Impl::CheckDuplicateKeys(size_t start) {
  auto first = keys.begin() + static_cast<ptrdiff_t>(start);
  std::sort(first, keys.end());
  const auto dup = std::adjacent_find(first, keys.end());
  if (dup != keys.end()) {
    fatal_key = *dup;
    return Fail(Fatal::kDuplicateKey);
  }
  keys.resize(start);
  return true;
}

bool EventParser::Impl::SkipObject(od::object o, int depth) {
  const size_t start = keys.size();
  for (auto field : o) {
    std::string_view key;
    if (!Check(field.unescaped_key().get(key))) return false;
    keys.push_back(key);
    od::value v;
    if (!Check(field.value().get(v))) return false;
    if (!SkipValue(v, depth + 1)) return false;
  }
  return CheckDuplicateKeys(start);
}

// `depth`: the depth `v` has if it is an object or an array.
bool EventParser::Impl::SkipValue(od::value v, int depth) {
  od::json_type type;
  if (!Check(v.type().get(type))) return false;
  switch (type) {
    case od::json_type::object: {
      if (depth > kMaxJsonDepth) return Fail(Fatal::kTooDeep);
      od::object o;
      if (!Check(v.get_object().get(o))) return false;
      return SkipObject(o, depth);
    }
    case od::json_type::array: {
      if (depth > kMaxJsonDepth) return Fail(Fatal::kTooDeep);
      od::array a;
      if (!Check(v.get_array().get(a))) return false;
      for (auto element : a) {
        od::value e;
        if (!Check(element.get(e))) return false;
        if (!SkipValue(e, depth + 1)) return false;
      }
      return true;
    }
    case od::json_type::string: {
      // Unescaping validates escapes and rejects lone surrogates.
      std::string_view s;
      return Check(v.get_string().get(s));
    }
    case od::json_type::number: {
      std::string_view token;
      internal::JsonNumber kind;
      return CheckNumberSyntax(v, &token, &kind);
    }
    case od::json_type::boolean: {
      bool b;
      return Check(v.get_bool().get(b));
    }
    case od::json_type::null: {
      bool is_null = false;
      if (!Check(v.is_null().get(is_null))) return false;
      return is_null || Json(simdjson::N_ATOM_ERROR);
    }
  }
  return Json(simdjson::TAPE_ERROR);
}

bool EventParser::Impl::ReadInteger(od::value v, int depth, const IntRange& range, uint64_t* out,
                                    Problem* problem) {
  od::json_type type;
  if (!Check(v.type().get(type))) return false;
  if (type != od::json_type::number) {
    *problem = range.not_integer;
    return SkipValue(v, depth);
  }
  std::string_view token;
  internal::JsonNumber kind;
  if (!CheckNumberSyntax(v, &token, &kind)) return false;
  // Dispatch on the text, as Python's json module does (int unless there is
  // a fraction or an exponent). Not get_number(): simdjson 3.0.1's returns 0
  // for a float with more than 19 significant digits ("9223372036854774784.0").
  // An error below is a grammatical number simdjson cannot represent: an
  // integer beyond 64 bits or a float beyond DBL_MAX (Python reads inf, which
  // is not an integer): out of range either way.
  uint64_t value = 0;
  if (kind == internal::JsonNumber::kInteger) {
    // Digits only, checked above: the value is read here, without a second
    // pass by simdjson. Beyond 64 bits is out of range, as get_uint64 says.
    for (char c : token) {
      if (__builtin_mul_overflow(value, 10, &value) ||
          __builtin_add_overflow(value, static_cast<uint64_t>(c - '0'), &value)) {
        *problem = range.out_of_range;
        return true;
      }
    }
  } else if (kind == internal::JsonNumber::kOther) {
    // JSON Schema: 5.0 and 5e0 are integers. simdjson rounds correctly, as
    // Python's float() does, so both see the same double.
    double d = 0;
    if (v.get_double().get(d) != simdjson::SUCCESS) {
      *problem = range.out_of_range;
      return true;
    }
    if (!std::isfinite(d) || d != std::floor(d)) {
      *problem = range.not_integer;
      return true;
    }
    // Every range ends at or below 2^63-1; 2^63 is the first double above.
    if (d < 0 || d >= 9223372036854775808.0) {
      *problem = range.out_of_range;
      return true;
    }
    value = static_cast<uint64_t>(d);  // -0.0 is 0, as in Python
  } else if (token != "-0") {
    // A negative integer ("-0" is 0).
    *problem = range.out_of_range;
    return true;
  }
  if (value < range.min || value > range.max) {
    *problem = range.out_of_range;
    return true;
  }
  *out = value;
  return true;
}

bool EventParser::Impl::ReadId(od::value v, int depth, uint64_t* out, Problem* problem) {
  od::json_type type;
  if (!Check(v.type().get(type))) return false;
  if (type == od::json_type::number) return ReadInteger(v, depth, kIdRange, out, problem);
  if (type != od::json_type::string) {
    *problem = Problem::kNotId;
    return SkipValue(v, depth);
  }
  std::string_view s;
  if (!Check(v.get_string().get(s))) return false;
  switch (internal::ParseIdString(s, out)) {
    case internal::IdStringCheck::kOk:
      break;
    case internal::IdStringCheck::kMalformed:
      *problem = Problem::kMalformedIdString;
      break;
    case internal::IdStringCheck::kOutOfRange:
      *problem = Problem::kIdOutOfRange;
      break;
  }
  return true;
}

bool EventParser::Impl::ReadString(od::value v, int depth, std::string_view* out,
                                   Problem* problem) {
  od::json_type type;
  if (!Check(v.type().get(type))) return false;
  if (type != od::json_type::string) {
    *problem = Problem::kNotString;
    return SkipValue(v, depth);
  }
  return Check(v.get_string().get(*out));
}

bool EventParser::Impl::ReadTargetIds(od::value v, Event* out, Slot* slot) {
  constexpr int kDepth = 2;  // a field of the event object
  od::json_type type;
  if (!Check(v.type().get(type))) return false;
  if (type != od::json_type::array) {
    slot->problem = Problem::kNotArray;
    return SkipValue(v, kDepth);
  }
  od::array a;
  if (!Check(v.get_array().get(a))) return false;
  int32_t count = 0;
  for (auto element : a) {
    od::value e;
    if (!Check(element.get(e))) return false;
    uint64_t id = 0;
    Problem problem = Problem::kNone;
    if (!ReadId(e, kDepth + 1, &id, &problem)) return false;
    if (problem != Problem::kNone && slot->problem == Problem::kNone) {
      slot->problem = problem;
      slot->index = count;
    }
    // Keep walking past the limit (the rest must still be valid JSON) but
    // stop storing: the event is rejected anyway.
    if (problem == Problem::kNone && out->target_ids.size() < kMaxMentionTargets) {
      out->target_ids.push_back(id);
    }
    ++count;
  }
  if (slot->problem == Problem::kNone && (count < 1 || count > int32_t{kMaxMentionTargets})) {
    slot->problem = Problem::kItemCount;
  }
  return true;
}

bool EventParser::Impl::ReadSnapshot(od::value v, Event* out, Slot* slot) {
  constexpr int kDepth = 2;
  od::json_type type;
  if (!Check(v.type().get(type))) return false;
  if (type != od::json_type::object) {
    slot->problem = Problem::kNotObject;
    return SkipValue(v, kDepth);
  }
  od::object o;
  if (!Check(v.get_object().get(o))) return false;
  const size_t start = keys.size();
  size_t count = 0;
  for (auto field : o) {
    std::string_view key;
    if (!Check(field.unescaped_key().get(key))) return false;
    keys.push_back(key);
    od::value value;
    if (!Check(field.value().get(value))) return false;
    uint64_t followee = 0;
    const bool key_ok = internal::ParseIdString(key, &followee) == internal::IdStringCheck::kOk;
    uint64_t posts = 0;
    Problem problem = Problem::kNone;
    if (!ReadInteger(value, kDepth + 1, kCountRange, &posts, &problem)) return false;
    if (slot->problem == Problem::kNone && (!key_ok || problem != Problem::kNone)) {
      slot->problem = key_ok ? problem : Problem::kBadSnapshotKey;
      slot->detail = key;
    }
    if (key_ok && problem == Problem::kNone && out->snapshot.size() < kMaxSnapshotEntries) {
      out->snapshot.emplace_back(followee, posts);
    }
    ++count;
  }
  if (!CheckDuplicateKeys(start)) return false;
  if (slot->problem == Problem::kNone && count > kMaxSnapshotEntries) {
    slot->problem = Problem::kTooManyEntries;
  }
  return true;
}

bool EventParser::Impl::ReadField(Field f, od::value v, Event* out) {
  constexpr int kDepth = 2;
  Slot& slot = slots[static_cast<int>(f)];
  slot.present = true;
  switch (f) {
    case Field::kType:
      return ReadString(v, kDepth, &type_name, &slot.problem);
    case Field::kTs: {
      uint64_t value = 0;
      if (!ReadInteger(v, kDepth, kTsRange, &value, &slot.problem)) return false;
      ts = static_cast<int64_t>(value);
      return true;
    }
    case Field::kId: {
      std::string_view s;
      if (!ReadString(v, kDepth, &s, &slot.problem)) return false;
      if (slot.problem == Problem::kNone && !internal::IsEventId(s)) {
        slot.problem = Problem::kBadEventId;
        slot.detail = s;
      }
      out->id.assign(s.data(), s.size());
      return true;
    }
    case Field::kTitle: {
      std::string_view s;
      if (!ReadString(v, kDepth, &s, &slot.problem)) return false;
      if (slot.problem == Problem::kNone && internal::CountCodePoints(s) > kMaxTitleCodePoints) {
        slot.problem = Problem::kTitleTooLong;
      }
      out->title.assign(s.data(), s.size());
      return true;
    }
    case Field::kChannel: {
      std::string_view s;
      if (!ReadString(v, kDepth, &s, &slot.problem)) return false;
      if (slot.problem == Problem::kNone && !internal::IsChannelName(s)) {
        slot.problem = Problem::kBadChannel;
        slot.detail = s;
      }
      out->channel.assign(s.data(), s.size());
      return true;
    }
    case Field::kKind: {
      std::string_view s;
      if (!ReadString(v, kDepth, &s, &slot.problem)) return false;
      if (slot.problem == Problem::kNone && !ParseUnreadKind(s, &kind)) {
        slot.problem = Problem::kUnknownKind;
        slot.detail = s;
      }
      return true;
    }
    case Field::kTargetIds:
      return ReadTargetIds(v, out, &slot);
    case Field::kSnapshot:
      return ReadSnapshot(v, out, &slot);
    default:  // the ids
      return ReadId(v, kDepth, &ids[static_cast<int>(f)], &slot.problem);
  }
}

Status EventParser::Impl::FatalStatus() const {
  switch (fatal) {
    case Fatal::kNone:
      break;
    case Fatal::kJson:
      return Status::InvalidArgument(fmt::format("not valid JSON: {}", JsonErrorText(json_error)));
    case Fatal::kMalformedNumber:
      return Status::InvalidArgument("not valid JSON: malformed number");
    case Fatal::kTooDeep:
      return Status::InvalidArgument(
          fmt::format("not valid JSON: nesting deeper than {}", kMaxJsonDepth));
    case Fatal::kDuplicateKey: {
      std::string msg = "duplicate field ";
      internal::AppendQuotedForReason(&msg, fatal_key);
      return Status::InvalidArgument(std::move(msg));
    }
    case Fatal::kTrailing:
      return Status::InvalidArgument("not valid JSON: trailing content after the object");
    case Fatal::kNotObject:
      return Status::InvalidArgument("not a JSON object");
    case Fatal::kRootMalformed:
      return Status::InvalidArgument("not valid JSON: unexpected character at the start");
    case Fatal::kByteOrderMark:
      return Status::InvalidArgument("not valid JSON: starts with a byte order mark");
  }
  return Status::Internal("no fatal error recorded");
}

Status EventParser::Impl::SlotStatus(Field f) const {
  const Slot& slot = slots[static_cast<int>(f)];
  std::string msg = "field ";
  msg.append(kFieldNames[static_cast<int>(f)]);
  if (slot.index >= 0) msg.append(fmt::format("[{}]", slot.index));
  switch (slot.problem) {
    case Problem::kBadSnapshotKey:  // field snapshot: key "01" is not ...
      msg.append(": key ");
      internal::AppendQuotedForReason(&msg, slot.detail);
      msg.push_back(' ');
      break;
    case Problem::kUnknownKind:  // field kind: unknown kind "x"
    case Problem::kBadChannel:   // field channel: "A" is not ...
    case Problem::kBadEventId:   // field id: "" is not ...
      msg.append(": ");
      if (slot.problem == Problem::kUnknownKind) msg.append("unknown kind ");
      internal::AppendQuotedForReason(&msg, slot.detail);
      if (slot.problem == Problem::kUnknownKind) return Status::InvalidArgument(std::move(msg));
      msg.push_back(' ');
      break;
    default:
      if (f == Field::kSnapshot && !slot.detail.empty()) {  // field snapshot["5"]: ...
        msg.push_back('[');
        internal::AppendQuotedForReason(&msg, slot.detail);
        msg.push_back(']');
      }
      msg.append(": ");
  }
  msg.append(ProblemText(slot.problem));
  return Status::InvalidArgument(std::move(msg));
}

Status EventParser::Impl::Finish(Event* out) {
  const Slot& type_slot = slots[static_cast<int>(Field::kType)];
  if (!type_slot.present) return Status::InvalidArgument("missing field type");
  if (type_slot.problem != Problem::kNone) return SlotStatus(Field::kType);
  EventType type;
  if (!ParseEventType(type_name, &type)) {
    std::string msg = "unknown type ";
    internal::AppendQuotedForReason(&msg, type_name);
    return Status::InvalidArgument(std::move(msg));
  }

  const TypeRules rules = RulesFor(type);
  uint32_t used = 0;
  auto check = [&](const Rule& rule) -> Status {
    const Slot& slot = slots[static_cast<int>(rule.field)];
    if (!slot.present) {
      if (rule.required) {
        return Status::InvalidArgument(
            fmt::format("missing field {}", kFieldNames[static_cast<int>(rule.field)]));
      }
      return Status::Ok();
    }
    if (slot.problem != Problem::kNone) return SlotStatus(rule.field);
    used |= Bit(rule.field);
    return Status::Ok();
  };
  for (const Rule& rule : kCommonRules) TALLY_RETURN_IF_ERROR(check(rule));
  for (int i = 0; i < rules.count; ++i) TALLY_RETURN_IF_ERROR(check(rules.rules[i]));

  if (type == EventType::kRead) {
    // The if/then blocks of read.json: one extra field per kind, at most.
    Field needed = Field::kType;
    if (kind == UnreadKind::kNotice) needed = Field::kNoticeId;
    if (kind == UnreadKind::kRedDot) needed = Field::kChannel;
    if (kind == UnreadKind::kFeed) needed = Field::kSnapshot;
    if (needed != Field::kType) TALLY_RETURN_IF_ERROR(check(Rule{needed, true}));
    // Validated when present, but stored only for the kind that uses them.
    used &= ~(Bit(Field::kNoticeId) | Bit(Field::kChannel) | Bit(Field::kSnapshot));
    if (needed != Field::kType) used |= Bit(needed);
    out->read_kind = kind;
  }

  out->type = type;
  out->ts = ts;
  auto id = [&](Field f) { return (used & Bit(f)) ? ids[static_cast<int>(f)] : 0; };
  out->post_id = id(Field::kPostId);
  out->user_id = id(Field::kUserId);
  out->author_id = id(Field::kAuthorId);
  out->target_id = id(Field::kTargetId);
  out->from_user_id = id(Field::kFromUserId);
  out->to_user_id = id(Field::kToUserId);
  out->notice_id = id(Field::kNoticeId);
  // Parsing filled these whatever the type; clear() keeps their capacity.
  if (!(used & Bit(Field::kTargetIds))) out->target_ids.clear();
  if (!(used & Bit(Field::kTitle))) out->title.clear();
  if (!(used & Bit(Field::kChannel))) out->channel.clear();
  if (!(used & Bit(Field::kSnapshot))) out->snapshot.clear();
  return Status::Ok();
}

Status EventParser::Impl::Parse(std::string_view json, Event* out) {
  out->Clear();
  fatal = Fatal::kNone;
  json_error = simdjson::SUCCESS;
  fatal_key = {};
  for (Slot& s : slots) s = Slot{};
  keys.clear();
  type_name = {};
  kind = UnreadKind::kMention;
  ts = 0;

  if (json.size() >= 3 && std::memcmp(json.data(), "\xEF\xBB\xBF", 3) == 0) {
    Fail(Fatal::kByteOrderMark);
    return FatalStatus();
  }
  // Grow geometrically so that a slowly growing input size does not
  // reallocate on every call (simdjson itself would size exactly).
  if (json.size() > buffer.size() || buffer.data() == nullptr) {
    buffer = simdjson::padded_string(std::max({json.size(), 2 * buffer.size(), kMinBuffer}));
  }
  if (json.size() > parser.capacity() || parser.capacity() == 0) {
    if (!Check(parser.allocate(std::max({json.size(), 2 * parser.capacity(), kMinBuffer})))) {
      return FatalStatus();
    }
  }
  std::memcpy(buffer.data(), json.data(), json.size());
  std::memset(buffer.data() + json.size(), 0, simdjson::SIMDJSON_PADDING);
  const simdjson::padded_string_view input(buffer.data(), json.size(),
                                           buffer.size() + simdjson::SIMDJSON_PADDING);

  od::document doc;
  od::object root;
  bool ok = Check(parser.iterate(input).get(doc));
  if (ok) {
    const simdjson::error_code e = doc.get_object().get(root);
    ok = e == simdjson::INCORRECT_TYPE
             ? Fail(RootIsAnotherValue(json) ? Fatal::kNotObject : Fatal::kRootMalformed)
             : Check(e);
  }
  if (ok) {
    uint32_t seen = 0;
    for (auto field : root) {
      std::string_view key;
      od::value v;
      if (!(ok = Check(field.unescaped_key().get(key)))) break;
      if (!(ok = Check(field.value().get(v)))) break;
      Field f;
      if (LookupField(key, &f)) {
        if (seen & Bit(f)) {
          fatal_key = key;
          ok = Fail(Fatal::kDuplicateKey);
          break;
        }
        seen |= Bit(f);
        ok = ReadField(f, v, out);
      } else {
        keys.push_back(key);  // the root's frame: unknown keys only
        ok = SkipValue(v, 2);
      }
      if (!ok) break;
    }
  }
  if (ok) ok = CheckDuplicateKeys(0);
  // The object must be the whole document: whitespace may follow, not more.
  if (ok && doc.current_location().error() != simdjson::OUT_OF_BOUNDS) ok = Fail(Fatal::kTrailing);

  Status status = ok ? Finish(out) : FatalStatus();
  if (!status.ok()) out->Clear();
  return status;
}

EventParser::EventParser() : impl_(new Impl) { impl_->keys.reserve(64); }

EventParser::~EventParser() { delete impl_; }

Status EventParser::Parse(std::string_view json, Event* out) { return impl_->Parse(json, out); }

}  // namespace tally::schemas
