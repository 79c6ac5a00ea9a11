#include "responses.h"

#include <fmt/core.h>

#include <algorithm>
#include <utility>

#include "request_target.h"
#include "schemas/json_escape.h"

namespace tally::query {

namespace {

constexpr char kIdRule[] =
    "ids are decimal integers 1..9223372036854775807 without sign or leading zeros";

std::string_view DefaultErrorCode(int http_status) {
  switch (http_status) {
    case 400:
      return "bad_request";
    case 401:
      return "unauthorized";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 413:
      return "payload_too_large";
    case 501:
      return "not_implemented";
    case 503:
      return "unavailable";
    case 504:
      return "not_yet_visible";
    default:
      return "internal";
  }
}

}  // namespace

int HttpStatusFor(base::StatusCode code) {
  switch (code) {
    case base::StatusCode::kOk:
      return 200;
    case base::StatusCode::kInvalidArgument:
      return 400;
    case base::StatusCode::kNotFound:
      return 404;
    case base::StatusCode::kResourceExhausted:
      return 413;
    case base::StatusCode::kUnavailable:
      return 503;
    case base::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string RenderErrorBody(std::string_view code, std::string_view message) {
  size_t eol = message.find_first_of("\r\n");
  if (eol != std::string_view::npos) message = message.substr(0, eol);
  std::string out;
  out.reserve(48 + code.size() + message.size());
  out.append("{\"error\":{\"code\":");
  schemas::AppendJsonString(&out, code);
  out.append(",\"message\":");
  schemas::AppendJsonString(&out, message);
  out.append("}}");
  return out;
}

namespace internal {

Response JsonResponse(int status, std::string body) {
  return Response{status, kJsonContentType, std::move(body), {}};
}

Response ProtocolError(int http_status, std::string_view message, std::string_view code) {
  return JsonResponse(
      http_status, RenderErrorBody(code.empty() ? DefaultErrorCode(http_status) : code, message));
}

Response ErrorResponse(const base::Status& status, std::string_view code) {
  int http = HttpStatusFor(status.code());
  return JsonResponse(
      http, RenderErrorBody(code.empty() ? DefaultErrorCode(http) : code, status.message()));
}

Response BadId(std::string_view what, std::string_view text) {
  std::string name(what);
  std::replace(name.begin(), name.end(), '_', ' ');
  // Raw bytes are fine here: RenderErrorBody escapes them.
  std::string msg = fmt::format("bad {} \"{}\": {}", name, Clip(text), kIdRule);
  return ErrorResponse(base::Status::InvalidArgument(std::move(msg)), "bad_id");
}

}  // namespace internal
}  // namespace tally::query
