// The cluster workloads (cluster_workloads.h), on the harness of
// cluster_harness.h.
#include "cluster_workloads.h"

#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "cluster/member_info.h"
#include "cluster_harness.h"
#include "schemas/delta.h"

namespace tally::bench {
namespace {

using base::Result;
using base::Status;
using cluster::HasPartition;
using cluster::MemberInfo;

WorkloadResult Row(const std::string& workload, const std::string& unit, double value) {
  WorkloadResult r;
  r.workload = workload;
  r.unit = unit;
  r.value = value;
  return r;
}

}  // namespace

ClusterWorkloads::ClusterWorkloads(ClusterBenchOptions options) : o_(std::move(options)) {
  std::filesystem::create_directories(o_.dir);
}

ClusterWorkloads::~ClusterWorkloads() = default;

// ---- cluster_failover -------------------------------------------------------

Status ClusterWorkloads::Failover(std::vector<WorkloadResult>* rows) {
  for (int standbys : {0, 1}) {
    const std::string what = fmt::format("cluster_failover standbys={}", standbys);
    Cluster c(o_, fmt::format("{}/failover-standbys{}", o_.dir, standbys), o_.failover_partitions,
              standbys);
    TALLY_RETURN_IF_ERROR(c.Start());
    Progress(fmt::format("{}: 3 members, {} partitions, {} events/s", what, c.partitions(),
                         o_.failover_rate));
    for (int i = 0; i < 3; i++) TALLY_RETURN_IF_ERROR(c.Add().status());
    Process load;
    TALLY_RETURN_IF_ERROR(
        load.Start(c.TallyArgs({"produce", "--brokers", c.brokers(), "--gen",
                                std::to_string(o_.failover_rate * 7200), "--rate",
                                std::to_string(o_.failover_rate), "--seed", std::to_string(o_.seed),
                                "--users", std::to_string(o_.users), "--posts",
                                std::to_string(o_.posts), "--log-level", "warn"}),
                   c.Path("produce.log")));
    TALLY_RETURN_IF_ERROR(c.WaitSettled(300, what));

    std::vector<double> served, unserved, owned, redundant, moved, rejoin;
    for (int rep = 1; rep <= o_.repeats; rep++) {
      // The victim: the member owning the most partitions.
      auto view = c.View();
      const MemberInfo* top = nullptr;
      for (const auto& m : view) {
        if (!top || m.owns.size() > top->owns.size()) top = &m;
      }
      Member* victim = nullptr;
      for (Member* m : c.Alive()) {
        if (m->id == top->member) victim = m;
      }
      const std::vector<int32_t> parts = top->owns;
      Progress(fmt::format("{}: kill {} of {}: SIGKILL {} (owns {})", what, rep, o_.repeats,
                           victim->id, fmt::join(parts, ",")));
      auto t0 = Clock::now();
      c.Kill(victim);
      // served: from the kill until every partition is served and stays
      // so to the end of the watch; unserved: how long, in all, some
      // partition had no current holder (a standby may drop its copy
      // before an owner takes over).
      double t_served = NAN, t_owned = NAN, t_redundant = NAN, unserved_s = 0, last_t = 0;
      bool was_served = true;
      while (SecondsSince(t0) < 900) {
        auto v = c.View();
        const double t = SecondsSince(t0);
        bool all_served = true, all_owned = true, all_redundant = true;
        for (int32_t p : parts) {
          int owners = 0, standby = 0;
          for (const auto& m : v) {
            owners += HasPartition(m.owns, p);
            standby += HasPartition(m.standby, p);
          }
          all_served &= owners + standby > 0;
          all_owned &= owners > 0;
          all_redundant &= owners > 0 && standby >= standbys;
        }
        if (!was_served) unserved_s += t - last_t;
        if (all_served && (std::isnan(t_served) || !was_served)) t_served = t;
        was_served = all_served;
        last_t = t;
        if (all_owned && std::isnan(t_owned)) t_owned = t;
        if (all_redundant && std::isnan(t_redundant)) t_redundant = t;
        if (!std::isnan(t_owned) && !std::isnan(t_redundant) && all_served) break;
        SleepMs(5);
      }
      if (std::isnan(t_owned) || std::isnan(t_redundant)) {
        return Status::Unavailable(
            fmt::format("{}: partitions of {} not owned again within 900 s", what, victim->id));
      }
      served.push_back(t_served);
      unserved.push_back(unserved_s);
      owned.push_back(t_owned);
      redundant.push_back(t_redundant);
      moved.push_back(static_cast<double>(parts.size()));
      Progress(
          fmt::format("{}: served for good after {:.2f} s ({:.2f} s unserved in all), owned after "
                      "{:.2f} s, with {} "
                      "standby after {:.2f} s",
                      what, t_served, unserved_s, t_owned, standbys, t_redundant));
      if (rep < o_.repeats) {
        // Through the embedded broker a restore from offset 0 goes one
        // produced batch per partition per fetch, so it can take minutes.
        Progress(fmt::format("{}: a fresh member replaces it", what));
        auto s0 = Clock::now();
        TALLY_RETURN_IF_ERROR(c.Add().status());
        TALLY_RETURN_IF_ERROR(c.WaitSettled(900, what));
        rejoin.push_back(SecondsSince(s0));
        Progress(fmt::format("{}: settled again {:.1f} s after the fresh member started", what,
                             rejoin.back()));
      }
    }
    load.Stop(5);
    c.StopAll();
    WorkloadResult r =
        Row(fmt::format("cluster_failover/sb{}", standbys), "s served", Median(served));
    r.target = standbys ? "served by the standby at once" : "-";
    r.extra["served_s_min"] = Min(served);
    r.extra["served_s_max"] = Max(served);
    r.extra["unserved_s"] = Median(unserved);
    r.extra["unserved_s_max"] = Max(unserved);
    r.extra["owned_s"] = Median(owned);
    r.extra["owned_s_min"] = Min(owned);
    r.extra["owned_s_max"] = Max(owned);
    if (standbys > 0) {
      r.extra["standby_again_s"] = Median(redundant);
      r.extra["standby_again_s_min"] = Min(redundant);
      r.extra["standby_again_s_max"] = Max(redundant);
    }
    r.extra["partitions_moved"] = Median(moved);
    r.extra["replacement_settled_s"] = Median(rejoin);
    r.extra["kills"] = static_cast<double>(served.size());
    std::printf("\n%s (%d partitions, %lld events/s, %d kills)\n", what.c_str(),
                o_.failover_partitions, static_cast<long long>(o_.failover_rate), o_.repeats);
    std::printf("  %-50s %8s %8s %8s   %s\n", "from SIGKILL until", "median", "min", "max", "each");
    auto line = [](const char* name, const std::vector<double>& v) {
      std::printf("  %-50s %8.2f %8.2f %8.2f   %s\n", name, Median(v), Min(v), Max(v),
                  Times(v).c_str());
    };
    line("served for good (a live member lists each current)", served);
    line("  of which some partition was unserved", unserved);
    line("owned again (a live member owns each)", owned);
    if (standbys > 0) line("owned again and with a current standby", redundant);
    if (!rejoin.empty()) line("(a fresh member: start until settled)", rejoin);
    std::fflush(stdout);
    rows->push_back(std::move(r));
  }
  return Status::Ok();
}

// ---- cluster_restore --------------------------------------------------------

Status ClusterWorkloads::Restore(std::vector<WorkloadResult>* rows) {
  const std::string what = "cluster_restore";
  Cluster c(o_, o_.dir + "/restore", o_.partitions, 0);
  TALLY_RETURN_IF_ERROR(c.Start());
  auto a = c.Add();
  if (!a.ok()) return a.status();
  TALLY_RETURN_IF_ERROR(c.WaitSettled(120, what));
  Progress(fmt::format("{}: {} events through one member into tally.deltas ({} partitions)", what,
                       o_.restore_events, c.partitions()));
  auto produced = RunCapture(
      c.TallyArgs({"produce", "--brokers", c.brokers(), "--gen", std::to_string(o_.restore_events),
                   "--seed", std::to_string(o_.seed), "--users", std::to_string(o_.users),
                   "--posts", std::to_string(o_.posts), "--log-level", "warn"}),
      c.Path("produce.log"), 900);
  if (!produced.ok()) return produced.status();
  Look last;
  Clock::time_point last_change;
  TALLY_RETURN_IF_ERROR(WaitQuiet(&c, static_cast<double>(o_.restore_events), 2, 900,
                                  what + ": filling", &last, &last_change));
  auto wm = c.TopicWatermarks(base::kDeltasTopic);
  if (!wm.ok()) return wm.status();
  int64_t deltas_records = 0;
  for (const auto& p : *wm) {
    if (p.low != 0) {
      return Status::ResourceExhausted(fmt::format(
          "tally.deltas/{} starts at offset {}: the embedded broker dropped records; use fewer "
          "--restore-events or more --partitions",
          p.partition, p.low));
    }
    deltas_records += p.high;
  }
  Progress(fmt::format("{}: tally.deltas holds {} records, {:.0f} deltas applied by one member",
                       what, deltas_records, last.applied.empty() ? 0.0 : last.applied[0]));

  std::vector<double> records_s, deltas_s, seconds, parts, records, deltas;
  for (int rep = 1; rep <= o_.repeats; rep++) {
    auto b = c.Add();
    if (!b.ok()) return b.status();
    Member* m = *b;
    Progress(fmt::format("{}: {} of {}: a fresh member {} joins", what, rep, o_.repeats, m->id));
    // Its applied deltas over time, to count those of the restore alone.
    std::vector<std::pair<int64_t, double>> samples;
    auto sample = [&] {
      auto body = c.Metrics(m);
      if (body.ok())
        samples.emplace_back(WallMs(), MetricValue(*body, "tally_applier_deltas_total"));
    };
    TALLY_RETURN_IF_ERROR(c.WaitSettled(600, what, sample));
    auto spans = RestoresInLog(m->log);
    if (spans.empty())
      return Status::Internal(fmt::format("{}: no partition restored from 0 in {}", what, m->log));
    int64_t start = INT64_MAX, end = 0, recs = 0;
    for (const auto& [p, s] : spans) {
      start = std::min(start, s.start_ms);
      end = std::max(end, s.end_ms);
      recs += s.records;
    }
    double before = 0;
    for (const auto& [t, v] : samples) {
      if (t <= start && !std::isnan(v)) before = v;
    }
    sample();
    const double after = samples.empty() ? NAN : samples.back().second;
    const double secs = std::max(0.001, static_cast<double>(end - start) / 1000.0);
    records_s.push_back(static_cast<double>(recs) / secs);
    deltas_s.push_back((after - before) / secs);
    seconds.push_back(secs);
    parts.push_back(static_cast<double>(spans.size()));
    records.push_back(static_cast<double>(recs));
    deltas.push_back(after - before);
    Progress(fmt::format(
        "{}: {} partitions, {} records, {:.0f} deltas restored in {:.2f} s: {:.0f} records/s, "
        "{:.0f} deltas/s",
        what, spans.size(), recs, after - before, secs, records_s.back(), deltas_s.back()));
    // It leaves; the first member takes its partitions back (restoring them
    // from 0 too: it dropped them), and the next fresh member joins.
    c.Leave(m);
    TALLY_RETURN_IF_ERROR(c.WaitSettled(600, what));
    std::filesystem::remove_all(m->dir);
  }
  c.StopAll();
  WorkloadResult r = Row("cluster_restore", "deltas/s", Median(deltas_s));
  r.extra["deltas_s_min"] = Min(deltas_s);
  r.extra["deltas_s_max"] = Max(deltas_s);
  r.extra["records_s"] = Median(records_s);
  r.extra["records_s_min"] = Min(records_s);
  r.extra["records_s_max"] = Max(records_s);
  r.extra["seconds"] = Median(seconds);
  r.extra["partitions"] = Median(parts);
  r.extra["records"] = Median(records);
  r.extra["deltas"] = Median(deltas);
  r.extra["deltas_topic_records"] = static_cast<double>(deltas_records);
  std::printf(
      "\n%s (%d partitions, tally.deltas of %lld events: %lld records; a fresh member restores its "
      "share)\n",
      what.c_str(), c.partitions(), static_cast<long long>(o_.restore_events),
      static_cast<long long>(deltas_records));
  std::printf("  %-24s %12s %12s %12s   %s\n", "", "median", "min", "max", "each");
  auto line = [](const char* name, const std::vector<double>& v) {
    std::vector<std::string> s;
    for (double x : v) s.push_back(fmt::format("{:.0f}", x));
    std::printf("  %-24s %12.0f %12.0f %12.0f   %s\n", name, Median(v), Min(v), Max(v),
                fmt::format("{}", fmt::join(s, ", ")).c_str());
  };
  line("records/s", records_s);
  line("deltas/s", deltas_s);
  line("partitions restored", parts);
  line("records restored", records);
  line("deltas restored", deltas);
  std::printf("  %-24s %12.2f %12.2f %12.2f   %s\n", "seconds", Median(seconds), Min(seconds),
              Max(seconds), Times(seconds).c_str());
  std::fflush(stdout);
  rows->push_back(std::move(r));
  return Status::Ok();
}

// ---- cluster_ingest, cluster_disk -------------------------------------------

Result<ClusterWorkloads::IngestRun> ClusterWorkloads::RunIngest(int members) {
  if (auto it = ingest_runs_.find(members); it != ingest_runs_.end()) return it->second;
  const std::string what = fmt::format("cluster_ingest members={}", members);
  Cluster c(o_, fmt::format("{}/ingest-{}", o_.dir, members), o_.partitions, 0);
  TALLY_RETURN_IF_ERROR(c.Start());
  for (int i = 0; i < members; i++) TALLY_RETURN_IF_ERROR(c.Add().status());
  TALLY_RETURN_IF_ERROR(c.WaitSettled(240, what));
  IngestRun run;

  // What the settled members cost at rest (heartbeats, polls, these looks).
  auto idle0 = LookAt(&c);
  if (!idle0.ok()) return idle0.status();
  auto i0 = Clock::now();
  while (SecondsSince(i0) < 5) {
    (void)LookAt(&c);
    SleepMs(50);
  }
  auto idle1 = LookAt(&c);
  if (!idle1.ok()) return idle1.status();
  run.idle_cpu_s = (idle1->cpu_s - idle0->cpu_s) / SecondsSince(i0);

  Progress(fmt::format("{}: publishing {} events at {} events/s", what, o_.ingest_events,
                       o_.ingest_rate));
  auto l0 = LookAt(&c);
  if (!l0.ok()) return l0.status();
  std::vector<std::map<std::string, std::pair<std::string, double>>> threads0;
  for (Member* m : c.Alive()) threads0.push_back(ThreadCpu(m->proc->pid()));
  auto t0 = Clock::now();
  auto produced = RunCapture(
      c.TallyArgs({"produce", "--brokers", c.brokers(), "--gen", std::to_string(o_.ingest_events),
                   "--rate", std::to_string(o_.ingest_rate), "--seed", std::to_string(o_.seed),
                   "--users", std::to_string(o_.users), "--posts", std::to_string(o_.posts),
                   "--log-level", "warn"}),
      c.Path("produce.log"), 1800);
  if (!produced.ok()) return produced.status();
  Look last;
  Clock::time_point last_change;
  TALLY_RETURN_IF_ERROR(WaitQuiet(&c, l0->routed + static_cast<double>(o_.ingest_events), 1.5, 900,
                                  what, &last, &last_change));
  run.cpu_s = last.cpu_s - l0->cpu_s;
  for (const auto& [name, v] : last.counters) run.counters[name] = v - l0->counters[name];
  {
    auto alive = c.Alive();
    for (size_t i = 0; i < alive.size(); i++) {
      for (const auto& [tid, t] : ThreadCpu(alive[i]->proc->pid())) {
        auto before = threads0[i].find(tid);
        run.thread_cpu_s[t.first] +=
            t.second - (before == threads0[i].end() ? 0.0 : before->second.second);
      }
    }
  }
  run.seconds = std::chrono::duration<double>(last_change - t0).count();
  run.lost = last.lost - l0->lost;
  for (const auto& info : c.View()) run.owns.push_back(info.owns);
  SleepMs(3000);
  for (Member* m : c.Alive()) run.disk_bytes.push_back(DirBytes(m->dir));
  auto alive = c.Alive();
  c.StopAll();
  for (Member* m : alive) {
    auto b = CompactedBytes(m->dir);
    if (!b.ok()) return b.status();
    run.disk_bytes_stop.push_back(*b);
  }
  double us = run.cpu_s / static_cast<double>(o_.ingest_events) * 1e6;
  Progress(fmt::format("{}: {:.2f} CPU s in {:.1f} s: {:.2f} us/event (idle {:.1f}% CPU); disk {}",
                       what, run.cpu_s, run.seconds, us, run.idle_cpu_s * 100,
                       fmt::join(run.disk_bytes, " / ")));
  ingest_runs_[members] = run;
  return run;
}

Status ClusterWorkloads::Ingest(std::vector<WorkloadResult>* rows) {
  const double n = static_cast<double>(o_.ingest_events);
  double base = NAN;
  std::printf("\ncluster_ingest (%lld events at %lld events/s, %d partitions)\n",
              static_cast<long long>(o_.ingest_events), static_cast<long long>(o_.ingest_rate),
              o_.partitions);
  std::printf("  %-8s %10s %12s %12s %14s %10s %8s\n", "members", "CPU s", "us/event", "x 1 member",
              "net us/event", "idle CPU%", "seconds");
  for (int k = 1; k <= 3; k++) {
    auto run = RunIngest(k);
    if (!run.ok()) return run.status();
    const double us = run->cpu_s / n * 1e6;
    const double net = (run->cpu_s - run->idle_cpu_s * run->seconds) / n * 1e6;
    if (k == 1) base = us;
    WorkloadResult r = Row(fmt::format("cluster_ingest/{}", k), "us/event", us);
    r.cpu_s = run->cpu_s;
    r.baseline = "1 member";
    r.baseline_value = base;
    r.ratio = us / base;
    r.target = "<= 1.15x";
    r.met = r.ratio <= 1.15;
    r.extra["net_us_per_event"] = net;
    r.extra["idle_cpu_pct"] = run->idle_cpu_s * 100;
    r.extra["seconds"] = run->seconds;
    r.extra["lost_records"] = run->lost;
    std::printf("  %-8d %10.2f %12.2f %12.3f %14.2f %10.1f %8.1f\n", k, run->cpu_s, us, r.ratio,
                net, run->idle_cpu_s * 100, run->seconds);
    std::fflush(stdout);
    rows->push_back(std::move(r));
  }
  std::printf("  work per event, sum over members   %10s %10s %10s\n", "1 member", "2", "3");
  for (std::string_view name : kCountersShown) {
    std::printf("  %-36s", std::string(name).c_str());
    for (int k = 1; k <= 3; k++) {
      auto& t = ingest_runs_[k].counters;
      auto it = t.find(std::string(name));
      std::printf(" %10.4f", it == t.end() ? 0.0 : it->second / n);
    }
    std::printf("\n");
  }
  // Where the CPU went: every member's threads by name (after the last
  // delta applied, a little later than the total above).
  std::set<std::string> names;
  for (int k = 1; k <= 3; k++) {
    for (const auto& [name, s] : ingest_runs_[k].thread_cpu_s) names.insert(name);
  }
  std::printf("  CPU us/event by thread name  %10s %10s %10s\n", "1 member", "2", "3");
  for (const auto& name : names) {
    std::printf("  %-28s", name.c_str());
    for (int k = 1; k <= 3; k++) {
      auto& t = ingest_runs_[k].thread_cpu_s;
      std::printf(" %10.2f", t.count(name) ? t[name] / n * 1e6 : 0.0);
    }
    std::printf("\n");
  }
  std::fflush(stdout);
  return Status::Ok();
}

Status ClusterWorkloads::Disk(std::vector<WorkloadResult>* rows) {
  auto one = RunIngest(1);
  if (!one.ok()) return one.status();
  auto three = RunIngest(3);
  if (!three.ok()) return three.status();
  const double whole = static_cast<double>(one->disk_bytes.at(0));
  const double whole_stop = static_cast<double>(one->disk_bytes_stop.at(0));
  std::printf(
      "\ncluster_disk (%lld events, %d partitions; the notices and red dots of partition %d on "
      "every member)\n",
      static_cast<long long>(o_.ingest_events), o_.partitions,
      schemas::PartitionOf(schemas::kGlobalEntity, static_cast<uint32_t>(o_.partitions)));
  std::printf("  %-10s %-18s %12s %10s %16s %10s\n", "member", "owns", "MB at lag 0", "x 1 member",
              "MB compacted", "x 1 member");
  auto line = [&](const std::string& name, const std::vector<int32_t>& owns, uint64_t b,
                  uint64_t bs) {
    std::printf("  %-10s %-18s %12.1f %10.3f %16.1f %10.3f\n", name.c_str(),
                fmt::format("{}", fmt::join(owns, ",")).c_str(), Mb(b),
                static_cast<double>(b) / whole, Mb(bs), static_cast<double>(bs) / whole_stop);
  };
  line("1 of 1", one->owns.empty() ? std::vector<int32_t>{} : one->owns[0], one->disk_bytes[0],
       one->disk_bytes_stop[0]);
  WorkloadResult r1 = Row("cluster_disk/1", "MB/member", Mb(one->disk_bytes[0]));
  r1.disk_mb = r1.value;
  r1.extra["mb_compacted"] = Mb(whole_stop);
  rows->push_back(r1);
  double sum = 0, sum_stop = 0;
  for (size_t i = 0; i < three->disk_bytes.size(); i++) {
    line(fmt::format("{} of 3", i + 1),
         i < three->owns.size() ? three->owns[i] : std::vector<int32_t>{}, three->disk_bytes[i],
         three->disk_bytes_stop[i]);
    sum += static_cast<double>(three->disk_bytes[i]);
    sum_stop += static_cast<double>(three->disk_bytes_stop[i]);
  }
  const double n3 = static_cast<double>(three->disk_bytes.size());
  WorkloadResult r3 = Row("cluster_disk/3", "MB/member", Mb(sum / n3));
  r3.disk_mb = r3.value;
  r3.baseline = "1 member";
  r3.baseline_value = Mb(whole);
  r3.ratio = sum / n3 / whole;
  r3.target = "about 1/3";
  r3.extra["sum_ratio"] = sum / whole;
  r3.extra["max_ratio"] =
      static_cast<double>(*std::max_element(three->disk_bytes.begin(), three->disk_bytes.end())) /
      whole;
  r3.extra["ratio_compacted"] = sum_stop / n3 / whole_stop;
  std::printf("  %-10s %-18s %12.1f %10.3f %16.1f %10.3f\n", "3: sum", "", Mb(sum), sum / whole,
              Mb(sum_stop), sum_stop / whole_stop);
  std::fflush(stdout);
  rows->push_back(std::move(r3));
  return Status::Ok();
}

}  // namespace tally::bench
