// SPDX-License-Identifier: Apache-2.0
#include "history.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mlarope/error.h"
#include "svg.h"

namespace mlarope::reports {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A commit name as a file name: characters other than [A-Za-z0-9._-] become '_'.
std::string file_name_of(const std::string& commit) {
  std::string name = commit.empty() ? "unknown" : commit;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-')
      ch = '_';
  return name + ".json";
}

// "op" of "op/backend/shape", and the rest.
std::pair<std::string, std::string> split_key(const std::string& key) {
  const std::size_t slash = key.find('/');
  return {key.substr(0, slash), slash == std::string::npos ? "" : key.substr(slash + 1)};
}

std::string short_commit(const std::string& commit) {
  return commit.size() > 10 ? commit.substr(0, 10) : commit;
}

}  // namespace

json to_json(const HistoryEntry& e) {
  json keys = json::object();
  for (const auto& [key, s] : e.keys)
    keys[key] = {{"n", s.repetitions}, {"median", s.floor_fraction}, {"min", s.floor_min},
                 {"q1", s.floor_q1},   {"q3", s.floor_q3},           {"max", s.floor_max},
                 {"gbps", s.gbps},     {"time_ms", s.time_ms}};
  return {{"format", "mlarope-bench-history-1"},
          {"commit", e.commit},
          {"date", e.date},
          {"machine", e.machine},
          {"measure", "floor_fraction"},
          {"gate", e.gate},
          {"flagged", std::vector<std::string>(e.flagged.begin(), e.flagged.end())},
          {"keys", keys}};
}

HistoryEntry history_entry_from_json(const json& j) {
  if (!j.is_object() || j.value("format", "") != "mlarope-bench-history-1")
    throw Error("not an mlarope history entry (no \"format\": \"mlarope-bench-history-1\")");
  try {
    HistoryEntry e;
    e.commit = j.at("commit").get<std::string>();
    e.date = j.at("date").get<std::string>();
    e.machine = j.value("machine", "");
    e.gate = j.value("gate", "");
    for (const json& k : j.value("flagged", json::array())) e.flagged.insert(k.get<std::string>());
    for (const auto& [key, v] : j.at("keys").items()) {
      KeySummary s;
      s.repetitions = v.at("n").get<int>();
      s.floor_fraction = v.at("median").get<double>();
      s.floor_min = v.value("min", s.floor_fraction);
      s.floor_q1 = v.value("q1", s.floor_fraction);
      s.floor_q3 = v.value("q3", s.floor_fraction);
      s.floor_max = v.value("max", s.floor_fraction);
      s.gbps = v.value("gbps", 0.0);
      s.time_ms = v.value("time_ms", 0.0);
      e.keys[key] = s;
    }
    return e;
  } catch (const json::exception& ex) {
    throw Error(std::string("a history entry missing a field or of the wrong type: ") + ex.what());
  }
}

std::string record_history(const std::string& dir, const HistoryEntry& entry) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw Error("--history " + dir + ": cannot create the folder");
  const fs::path path = fs::path(dir) / file_name_of(entry.commit);
  const fs::path partial = path.string() + ".partial";  // written whole, then renamed in place
  {
    std::ofstream out(partial);
    out << to_json(entry).dump(1) << "\n";
    if (!out) throw Error(partial.string() + ": cannot write");
  }
  fs::rename(partial, path, ec);
  if (ec) throw Error(path.string() + ": cannot write: " + ec.message());
  return path.string();
}

History read_history(const std::string& dir) {
  History h;
  h.dir = dir;
  if (!fs::is_directory(dir)) return h;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    try {
      std::ifstream in(file);
      json j;
      try {
        j = json::parse(in);
      } catch (const json::exception& ex) {
        throw Error(std::string("not valid JSON: ") + ex.what());
      }
      h.entries.push_back(history_entry_from_json(j));
    } catch (const Error& ex) {
      h.skipped.push_back(file.filename().string() + ": " + ex.what());
    }
  }
  std::stable_sort(h.entries.begin(), h.entries.end(),
                   [](const HistoryEntry& a, const HistoryEntry& b) {
                     return a.date != b.date ? a.date < b.date : a.commit < b.commit;
                   });
  return h;
}

std::string current_commit() {
  for (const char* name : {"GITHUB_SHA", "CI_COMMIT_SHA"})
    if (const char* value = std::getenv(name); value && *value) return value;
  std::string out;
  if (FILE* git = popen("git rev-parse HEAD 2>/dev/null", "r")) {
    char buf[128];
    while (std::fgets(buf, sizeof buf, git)) out += buf;
    pclose(git);
  }
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
  return out.empty() ? "unknown" : out;
}

std::string history_html(const History& h) {
  if (h.entries.empty() && h.skipped.empty()) return "";
  std::ostringstream html;
  html << "<h2>History</h2><p>" << h.entries.size() << " commits recorded in <code>"
       << escape(h.dir)
       << "</code>: the median floor fraction of each benchmark at each commit, oldest first; a "
          "ringed point is "
          "one the gate found SLOWER or UNKNOWN that run.</p>\n";
  if (!h.skipped.empty()) {
    html << "<p class='fail'>Skipped entries:</p><ul>";
    for (const std::string& s : h.skipped) html << "<li>" << escape(s) << "</li>";
    html << "</ul>\n";
  }
  std::vector<std::string> points;
  for (const HistoryEntry& e : h.entries)
    points.push_back(short_commit(e.commit) + " " + e.date.substr(0, 10));
  std::map<std::string, std::set<std::string>> lines;  // op -> backend/shape
  for (const HistoryEntry& e : h.entries)
    for (const auto& [key, _] : e.keys) {
      const auto [op, rest] = split_key(key);
      if (rest.rfind("copy", 0) != 0 && rest.rfind("strided_floor", 0) != 0) lines[op].insert(rest);
    }
  for (const auto& [op, rests] : lines) {
    std::vector<Series> series;
    std::vector<std::vector<bool>> flagged;
    for (const std::string& rest : rests) {
      const std::string key = op + "/" + rest;
      Series s{rest, {}};
      std::vector<bool> flags;
      for (const HistoryEntry& e : h.entries) {
        const auto it = e.keys.find(key);
        s.values.push_back(it == e.keys.end() ? NAN : it->second.floor_fraction);
        flags.push_back(e.flagged.count(key) > 0);
      }
      series.push_back(std::move(s));
      flagged.push_back(std::move(flags));
    }
    html << line_chart(op + ": floor fraction over the commits", points, series, flagged, "commit",
                       "median fraction of the copy floor");
  }
  return html.str();
}

std::string history_markdown(const History& h) {
  if (h.entries.empty() && h.skipped.empty()) return "";
  std::ostringstream md;
  md << "## History\n\n" << h.entries.size() << " commits in " << h.dir;
  if (!h.entries.empty())
    md << ", from " << short_commit(h.entries.front().commit) << " (" << h.entries.front().date
       << ") to " << short_commit(h.entries.back().commit) << " (" << h.entries.back().date << ")";
  md << "; the trend of each op is on the page.\n";
  for (const std::string& s : h.skipped) md << "- skipped " << s << "\n";
  return md.str() + "\n";
}

}  // namespace mlarope::reports
