/* gitmem view: the page's script.  Every value from the vault becomes a text node
   (textContent, createTextNode), never markup, so a title or a body cannot run script. */
(function () {
  "use strict";

  var PAGE = 50;            // rows per page of the timeline and the memory list
  var CHIPS = 4;            // memories named per commit in the timeline
  var DIFF_ROWS = 1500;     // diff rows drawn before a "show the rest" button
  var CONTEXT = 3;          // unchanged lines around a change, as git shows them
  var LCS_CELLS = 4000000;  // above this, a changed block is shown as removed + added
  var OPS = ["add", "update", "edit", "move", "rename", "delete", "restore", "compress", "archive",
    "unarchive", "merge", "reflect", "supersede", "sync", "import", "init"];

  var raw = JSON.parse(document.getElementById("gm-data").textContent);
  var versionsData = null;  // parsed on the first memory opened (the largest part of the page)

  var authors = raw.authors.map(function (a) { return { name: a[0], email: a[1] }; });
  var commits = raw.commits.map(function (c, i) {
    var touches = [];
    for (var k = 0; k < c[5].length; k += 2) touches.push({ mem: c[5][k], op: c[5][k + 1] });
    return { i: i, sha: c[0], time: c[1], author: c[2], op: c[3], subject: c[4], touches: touches,
      key: c[4].toLowerCase() };
  });
  var mems = raw.memories.map(function (m, i) {
    var versions = m[8].map(function (v) { return { commit: v[0], op: v[1], path: v[2] }; });
    var who = {};
    versions.forEach(function (v) { who[authors[commits[v.commit].author].name] = true; });
    return { i: i, id: m[0], title: m[1], type: m[2], tier: m[3], status: m[4], agent: m[5], tags: m[6],
      tagKeys: m[6].map(function (t) { return t.toLowerCase(); }), path: m[7], versions: versions,
      gone: m[4] === "removed", who: who, key: (m[1] + "\n" + (m[7] || "") + "\n" + m[0]).toLowerCase() };
  });

  var state = {
    tab: "timeline", page: { timeline: 0, memories: 0 },
    f: { author: "", type: "", tag: "", tier: "", from: null, to: null, text: "" },
    shownCommits: [], shownMems: [], open: null, openVersions: {}, focusCommit: null
  };

  // ------------------------------------------------------------- helpers
  function $(id) { return document.getElementById(id); }

  function el(tag, cls) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    for (var k = 2; k < arguments.length; k++) {
      var kid = arguments[k];
      if (kid === null || kid === undefined || kid === false) continue;
      node.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return node;
  }

  function pad(n) { return n < 10 ? "0" + n : String(n); }
  function when(t) {
    var d = new Date(t * 1000);
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " +
      pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
  }
  function day(t) { return when(t).slice(0, 10); }
  function fmt(n) { return n.toLocaleString("en-US"); }
  function plural(n, one, many) { return fmt(n) + " " + (n === 1 ? one : many); }
  function opBadge(op) {
    return el("span", "op op-" + (OPS.indexOf(op) >= 0 ? op : "other"), op);
  }
  function tierOf(path) { return path ? path.split("/")[0] : ""; }
  function uniqueSorted(values) {
    var seen = {}, out = [];
    values.forEach(function (v) { if (v && !Object.prototype.hasOwnProperty.call(seen, v)) { seen[v] = 1; out.push(v); } });
    return out.sort(function (a, b) { return a.localeCompare(b); });
  }
  function fillSelect(select, values, label) {
    values.forEach(function (v) {
      var option = el("option", null, label ? label(v) : v);
      option.value = v;
      select.appendChild(option);
    });
  }

  // ------------------------------------------------------------- filters
  function memAttrs(m) {  // type, tag and tier: what a commit is filtered by through its memories
    var f = state.f;
    if (f.type && m.type !== f.type) return false;
    if (f.tag && m.tagKeys.indexOf(f.tag) < 0) return false;
    if (f.tier && (f.tier === "(removed)" ? !m.gone : (m.gone || m.tier !== f.tier))) return false;
    return true;
  }
  function inRange(t) {
    var f = state.f;
    return (f.from === null || t >= f.from) && (f.to === null || t < f.to);
  }
  function memOk(m) {
    var f = state.f;
    if (!memAttrs(m)) return false;
    if (f.author && m.agent !== f.author && !m.who[f.author]) return false;
    if ((f.from !== null || f.to !== null) &&
        !m.versions.some(function (v) { return inRange(commits[v.commit].time); })) return false;
    if (f.text && m.key.indexOf(f.text) < 0) return false;
    return true;
  }
  function commitOk(c) {
    var f = state.f;
    if (f.author && authors[c.author].name !== f.author) return false;
    if (!inRange(c.time)) return false;
    if (f.text && c.key.indexOf(f.text) < 0) return false;
    if ((f.type || f.tag || f.tier) && !c.touches.some(function (t) { return memAttrs(mems[t.mem]); })) return false;
    return true;
  }
  function dateValue(input, next) {
    if (!input.value) return null;
    var t = Date.parse(input.value + "T00:00:00Z") / 1000;
    return isNaN(t) ? null : t + (next ? 86400 : 0);  // "to" includes the whole day
  }
  function readFilters() {
    state.f = {
      author: $("f-author").value, type: $("f-type").value, tag: $("f-tag").value, tier: $("f-tier").value,
      from: dateValue($("f-from"), false), to: dateValue($("f-to"), true),
      text: $("f-text").value.trim().toLowerCase()
    };
    state.page.timeline = 0;
    state.page.memories = 0;
    applyFilters();
  }
  function applyFilters() {
    state.shownCommits = [];
    for (var k = commits.length - 1; k >= 0; k--) if (commitOk(commits[k])) state.shownCommits.push(commits[k]);
    state.shownMems = mems.filter(memOk);
    $("count-timeline").textContent = fmt(state.shownCommits.length);
    $("count-memories").textContent = fmt(state.shownMems.length);
    renderTiers();
    renderList();
  }

  // ------------------------------------------------------------- header
  function renderHeader() {
    document.title = "gitmem view \u2013 " + raw.vault;
    $("vault-name").textContent = raw.vault;
    var summary = $("summary");
    // Every memory the Memories tab lists, removed ones included, so the two counts agree.
    var removed = mems.filter(function (m) { return m.gone; }).length;
    summary.appendChild(el("span", null, el("b", null, fmt(mems.length)), " memories",
      removed ? " (" + fmt(removed) + " removed), " : ", ",
      el("b", null, fmt(commits.length)), " commits by ", el("b", null, fmt(authors.length)), " authors"));
    summary.appendChild(document.createTextNode(" \u00b7 HEAD "));
    summary.appendChild(el("span", "sha", raw.head ? raw.head.slice(0, 8) : "none"));
    summary.appendChild(document.createTextNode(" \u00b7 generated " + raw.generated.replace("T", " ").replace("Z", " UTC")));
  }

  function renderTiers() {
    var box = $("tiers");
    box.textContent = "";
    var names = raw.tiers.slice();
    if (mems.some(function (m) { return m.gone; })) names.push("(removed)");
    names.forEach(function (name) {
      var inTier = mems.filter(function (m) { return name === "(removed)" ? m.gone : (!m.gone && m.tier === name); });
      var active = inTier.filter(function (m) { return m.status === "active"; }).length;
      var sub = name === "(removed)" ? "files removed from the vault"
        : fmt(active) + " active" + (inTier.length > active ? ", " + fmt(inTier.length - active) + " other" : "");
      var card = el("button", "tier-card" + (state.f.tier === name ? " active" : ""),
        el("div", "t-name", name), el("div", "t-count", fmt(inTier.length)), el("div", "t-sub", sub));
      card.type = "button";
      card.title = "Show only this tier";
      card.addEventListener("click", function () {
        $("f-tier").value = state.f.tier === name ? "" : name;
        if ($("f-tier").value) setTab("memories");
        readFilters();
      });
      box.appendChild(card);
    });
  }

  // ------------------------------------------------------------- lists
  function setTab(tab) {
    state.tab = tab;
    $("tab-timeline").classList.toggle("active", tab === "timeline");
    $("tab-memories").classList.toggle("active", tab === "memories");
    $("timeline").hidden = tab !== "timeline";
    $("memories").hidden = tab !== "memories";
    renderList();
  }

  function renderList() {
    if (state.tab === "timeline") renderTimeline(); else renderMemories();
  }

  function pageOf(items) {
    var pages = Math.max(1, Math.ceil(items.length / PAGE));
    var page = Math.min(state.page[state.tab], pages - 1);
    state.page[state.tab] = page;
    renderPager(page, pages, items.length);
    return items.slice(page * PAGE, page * PAGE + PAGE);
  }

  function renderPager(page, pages, total) {
    var box = $("pager");
    box.textContent = "";
    function go(to, label, enabled) {
      var b = el("button", null, label);
      b.type = "button";
      b.disabled = !enabled;
      b.addEventListener("click", function () { state.page[state.tab] = to; renderList(); $(state.tab).scrollIntoView({ block: "nearest" }); });
      box.appendChild(b);
    }
    go(0, "\u00ab First", page > 0);
    go(page - 1, "\u2039 Prev", page > 0);
    box.appendChild(el("span", "page-of", "Page " + fmt(page + 1) + " of " + fmt(pages) + " (" +
      plural(total, state.tab === "timeline" ? "commit" : "memory", state.tab === "timeline" ? "commits" : "memories") + ")"));
    go(page + 1, "Next \u203a", page < pages - 1);
    go(pages - 1, "Last \u00bb", page < pages - 1);
  }

  function renderTimeline() {
    var box = $("timeline");
    box.textContent = "";
    var rows = pageOf(state.shownCommits);
    if (!rows.length) { box.appendChild(el("div", "empty", "No commit matches the filters.")); return; }
    var narrowed = state.f.type || state.f.tag || state.f.tier;
    rows.forEach(function (c) {
      var touched = narrowed ? c.touches.filter(function (t) { return memAttrs(mems[t.mem]); }) : c.touches;
      var sub = el("div", "c-sub", el("span", "who", authors[c.author].name), el("span", "sha", c.sha.slice(0, 8)));
      sub.firstChild.title = authors[c.author].email;
      touched.slice(0, CHIPS).forEach(function (t) {
        var m = mems[t.mem];
        var chip = el("button", "mem-chip", m.title);
        chip.type = "button";
        chip.title = m.title + " (" + t.op + ")";
        chip.addEventListener("click", function () { openMemory(m.i, c.i); });
        sub.appendChild(chip);
      });
      if (touched.length > CHIPS) sub.appendChild(el("span", "more", "+" + fmt(touched.length - CHIPS) + " more"));
      var subject = el("span", "c-subject", c.subject);
      subject.title = c.subject;
      box.appendChild(el("div", "commit" + (c.op === "rename" ? " rename" : ""), el("div", "c-when", when(c.time)),
        el("div", "c-main", el("div", "c-top", opBadge(c.op), subject), sub)));
    });
  }

  function renderMemories() {
    var box = $("memories");
    box.textContent = "";
    var rows = pageOf(state.shownMems);
    if (!rows.length) { box.appendChild(el("div", "empty", "No memory matches the filters.")); return; }
    var table = el("table", "mem-table");
    var cols = el("colgroup");
    ["col-title", "col-type", "col-tier", "col-tags", "col-n", "col-date"].forEach(function (c) { cols.appendChild(el("col", c)); });
    table.appendChild(cols);
    var head = el("tr");
    ["Memory", "Type", "Tier", "Tags", "Ver.", "Changed"].forEach(function (h) { head.appendChild(el("th", null, h)); });
    table.appendChild(el("thead", null, head));
    var body = el("tbody");
    rows.forEach(function (m) {
      var link = el("button", "mem-link", m.title);
      link.type = "button";
      link.title = m.title;
      link.addEventListener("click", function () { openMemory(m.i, null); });
      var tags = el("td");
      m.tags.forEach(function (t) { tags.appendChild(el("span", "tag", t)); });
      var last = m.versions.length ? day(commits[m.versions[m.versions.length - 1].commit].time) : "not committed";
      var row = el("tr", "mem-row" + (state.open === m.i ? " selected" : ""),
        el("td", null, link, el("div", "path", m.path || "(file removed)")),
        el("td", null, m.type, m.agent ? el("div", "status", m.agent) : null),
        el("td", null, m.gone ? "" : m.tier, el("div", "status status-" + statusClass(m.status), m.status)),
        tags, el("td", "num", fmt(m.versions.length)), el("td", "date", last));
      body.appendChild(row);
    });
    table.appendChild(body);
    box.appendChild(table);
  }

  function statusClass(status) {
    return ["active", "deleted", "removed", "archived", "superseded"].indexOf(status) >= 0 ? status : "other";
  }

  // ------------------------------------------------------------- versions and diffs
  function versionsOf(m) {
    if (versionsData === null) {
      var node = $("gm-versions");
      versionsData = JSON.parse(node.textContent);
      node.textContent = "";  // the parsed copy is enough: free the text
    }
    var chain = versionsData[m.i] || [];
    var texts = [], before = null;
    chain.forEach(function (entry) {
      if (entry === null) { texts.push(null); return; }
      var lines = typeof entry === "string" ? entry.split("\n") : applyScript(before, entry);
      texts.push(lines);
      before = lines;
    });
    return texts;
  }

  // An edit script (see gitmem/view.py): n > 0 keeps n lines, n < 0 skips -n, a list inserts.
  function applyScript(before, script) {
    var out = [], at = 0, k, step;
    for (var s = 0; s < script.length; s++) {
      step = script[s];
      if (typeof step === "number") {
        if (step > 0) { for (k = 0; k < step; k++) out.push(before[at++]); } else at -= step;
      } else {
        for (k = 0; k < step.length; k++) out.push(step[k]);
      }
    }
    return out;
  }

  function trimEnd(lines) {
    return lines.length && lines[lines.length - 1] === "" ? lines.slice(0, -1) : lines;
  }

  // Line diff: common head and tail cut, then a longest-common-subsequence table.
  function diffLines(a, b) {
    var head = 0, tail = 0, out = [], k;
    while (head < a.length && head < b.length && a[head] === b[head]) head++;
    while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
    for (k = 0; k < head; k++) out.push([" ", a[k]]);
    var A = a.slice(head, a.length - tail), B = b.slice(head, b.length - tail), n = A.length, m = B.length;
    if (n && m && n * m <= LCS_CELLS) {
      var w = m + 1, L = new Uint16Array((n + 1) * w), i, j;
      for (i = n - 1; i >= 0; i--) {
        for (j = m - 1; j >= 0; j--) {
          L[i * w + j] = A[i] === B[j] ? L[(i + 1) * w + j + 1] + 1 : Math.max(L[(i + 1) * w + j], L[i * w + j + 1]);
        }
      }
      i = 0; j = 0;
      while (i < n && j < m) {
        if (A[i] === B[j]) { out.push([" ", A[i]]); i++; j++; }
        else if (L[(i + 1) * w + j] >= L[i * w + j + 1]) out.push(["-", A[i++]]);
        else out.push(["+", B[j++]]);
      }
      while (i < n) out.push(["-", A[i++]]);
      while (j < m) out.push(["+", B[j++]]);
    } else {
      A.forEach(function (line) { out.push(["-", line]); });
      B.forEach(function (line) { out.push(["+", line]); });
    }
    for (k = a.length - tail; k < a.length; k++) out.push([" ", a[k]]);
    return out;
  }

  // Unified-diff rows: hunks of changes with CONTEXT lines around them.
  function hunks(ops) {
    var rows = [], oldNo = 0, newNo = 0, numbered = [], k;
    ops.forEach(function (op) {
      if (op[0] !== "+") oldNo++;
      if (op[0] !== "-") newNo++;
      numbered.push({ sign: op[0], text: op[1], old: op[0] === "+" ? null : oldNo, new: op[0] === "-" ? null : newNo });
    });
    var keep = new Uint8Array(numbered.length);
    for (k = 0; k < numbered.length; k++) {
      if (numbered[k].sign === " ") continue;
      for (var j = Math.max(0, k - CONTEXT); j <= Math.min(numbered.length - 1, k + CONTEXT); j++) keep[j] = 1;
    }
    var start = -1;
    for (k = 0; k <= numbered.length; k++) {
      if (k < numbered.length && keep[k]) { if (start < 0) start = k; continue; }
      if (start < 0) continue;
      var part = numbered.slice(start, k), first = part[0];
      var oldStart = first.old !== null ? first.old : oldBefore(numbered, start) + 1;
      var newStart = first.new !== null ? first.new : newBefore(numbered, start) + 1;
      var oldCount = part.filter(function (r) { return r.sign !== "+"; }).length;
      var newCount = part.filter(function (r) { return r.sign !== "-"; }).length;
      rows.push({ hunk: "@@ -" + (oldCount ? oldStart : oldStart - 1) + "," + oldCount + " +" +
        (newCount ? newStart : newStart - 1) + "," + newCount + " @@" });
      part.forEach(function (r) { rows.push(r); });
      start = -1;
    }
    return rows;
  }
  function oldBefore(rows, k) { for (k--; k >= 0; k--) if (rows[k].old !== null) return rows[k].old; return 0; }
  function newBefore(rows, k) { for (k--; k >= 0; k--) if (rows[k].new !== null) return rows[k].new; return 0; }

  function drawRows(box, rows, from) {
    var end = Math.min(rows.length, from + DIFF_ROWS);
    for (var k = from; k < end; k++) {
      var r = rows[k];
      if (r.hunk) { box.appendChild(el("div", "diff-hunk", r.hunk)); continue; }
      box.appendChild(el("div", "diff-line" + (r.sign === "+" ? " add" : r.sign === "-" ? " del" : ""),
        el("span", "ln", r.old === null ? "" : r.old), el("span", "ln", r.new === null ? "" : r.new),
        el("span", "sg", r.sign === " " ? "" : r.sign), el("span", "tx", r.text)));
    }
    if (end < rows.length) {
      var more = el("button", "diff-more", "Show the other " + plural(rows.length - end, "line", "lines"));
      more.type = "button";
      more.addEventListener("click", function () { more.remove(); drawRows(box, rows, end); });
      box.appendChild(more);
    }
  }

  function versionBody(m, texts, k) {
    var body = el("div", "v-body");
    var after = texts[k], before = null;
    for (var j = k - 1; j >= 0; j--) if (texts[j] !== null) { before = texts[j]; break; }
    var v = m.versions[k], prevPath = null;
    for (j = k - 1; j >= 0; j--) if (m.versions[j].path) { prevPath = m.versions[j].path; break; }
    if (v.path && prevPath && v.path !== prevPath) {
      body.appendChild(el("div", "v-note", "Moved ", el("span", "d-path", prevPath), " \u2192 ", el("span", "d-path", v.path)));
    }
    if (after === null) body.appendChild(el("div", "v-note", "The file was removed from the vault in this commit."));
    var ops = diffLines(trimEnd(before || []), trimEnd(after || before || []));
    if (after === null) ops = ops.map(function (op) { return ["-", op[1]]; });
    var added = 0, removed = 0;
    ops.forEach(function (op) { if (op[0] === "+") added++; else if (op[0] === "-") removed++; });
    if (!added && !removed) {
      body.appendChild(el("div", "v-note", "The text did not change."));
      return body;
    }
    body.appendChild(el("div", "v-stats", el("span", "plus", "+" + fmt(added)), " ", el("span", "minus", "\u2212" + fmt(removed)),
      before === null ? " (new file)" : ""));
    var diff = el("div", "diff");
    drawRows(diff, hunks(ops), 0);
    body.appendChild(diff);
    return body;
  }

  // ------------------------------------------------------------- detail pane
  function openMemory(index, commitIndex) {
    var m = mems[index];
    state.open = index;
    state.focusCommit = commitIndex;
    var open = {};
    var focus = m.versions.length - 1;
    if (commitIndex !== null) {
      m.versions.forEach(function (v, k) { if (v.commit === commitIndex) focus = k; });
    }
    if (focus >= 0) open[focus] = true;
    state.openVersions = open;
    renderDetail();
    if (state.tab === "memories") renderMemories();
    try {
      history.replaceState(null, "", "#memory=" + encodeURIComponent(m.id) +
        (commitIndex !== null ? "&commit=" + commits[commitIndex].sha.slice(0, 12) : ""));
    } catch (e) { /* file:// pages in some browsers refuse: the page works without it */ }
  }

  function closeMemory() {
    state.open = null;
    renderDetail();
    if (state.tab === "memories") renderMemories();
    try { history.replaceState(null, "", "#"); } catch (e) { /* see openMemory */ }
  }

  function renderDetail() {
    var box = $("detail");
    box.textContent = "";
    if (state.open === null) {
      box.appendChild(el("p", "placeholder", "Choose a memory in the timeline or the memory list to see its versions, " +
        "what each commit changed in it, and its moves between tiers."));
      return;
    }
    var m = mems[state.open];
    var close = el("button", "d-close", "\u00d7");
    close.type = "button";
    close.title = "Close";
    close.addEventListener("click", closeMemory);
    box.appendChild(el("div", "d-head", el("h2", null, m.title), close));
    var meta = el("div", "d-meta",
      el("span", null, "type ", el("b", null, m.type)),
      el("span", null, "tier ", el("b", null, m.gone ? "(removed)" : m.tier)),
      el("span", null, "status ", el("b", "status-" + statusClass(m.status), m.status)),
      m.agent ? el("span", null, "agent ", el("b", null, m.agent)) : null);
    box.appendChild(meta);
    if (m.tags.length) {
      var tags = el("div", "d-tags");
      m.tags.forEach(function (t) { tags.appendChild(el("span", "tag", t)); });
      box.appendChild(tags);
    }
    box.appendChild(el("div", "d-id", "id " + m.id));
    if (m.path) box.appendChild(el("div", "d-path", m.path));

    var moves = [], last = null;
    m.versions.forEach(function (v) {
      if (v.path && last && v.path !== last) moves.push({ v: v, from: last });
      if (v.path) last = v.path;
    });
    if (moves.length) {
      box.appendChild(el("h3", null, "Moves between tiers (" + moves.length + ")"));
      var list = el("ul", "moves");
      moves.forEach(function (mv) {
        var c = commits[mv.v.commit];
        var from = el("b", null, tierOf(mv.from)), to = el("b", null, tierOf(mv.v.path));
        from.title = mv.from;
        to.title = mv.v.path;
        list.appendChild(el("li", null, el("span", "v-when", when(c.time)), " ", from, el("span", "arrow", "\u2192"), to,
          " ", el("span", "status", "by " + authors[c.author].name + " (" + mv.v.op + ")")));
      });
      box.appendChild(list);
    }

    box.appendChild(el("h3", null, "Versions (" + m.versions.length + ")"));
    if (!m.versions.length) {
      box.appendChild(el("p", "placeholder", "Not committed yet: the file is in the vault but no commit holds it."));
      return;
    }
    var texts = versionsOf(m);
    var list2 = el("ol", "versions"), focused = null;
    for (var k = m.versions.length - 1; k >= 0; k--) {
      var item = versionItem(m, texts, k);
      if (state.focusCommit !== null && m.versions[k].commit === state.focusCommit) { item.classList.add("focus"); focused = item; }
      list2.appendChild(item);
    }
    box.appendChild(list2);
    // A version asked for (from the timeline) is brought into the upper half of the pane;
    // only the pane scrolls (scrollIntoView would move the whole page too).
    box.scrollTop = 0;
    var offset = focused ? focused.getBoundingClientRect().top - box.getBoundingClientRect().top : 0;
    if (offset > box.clientHeight / 2) box.scrollTop = offset - 70;
  }

  function versionItem(m, texts, k) {
    var v = m.versions[k], c = commits[v.commit];
    var item = el("li", "version");
    var toggle = el("span", "v-toggle", state.openVersions[k] ? "\u25be" : "\u25b8");
    var subject = el("span", "v-subject", c.subject);
    subject.title = c.subject + "\n" + authors[c.author].name + " <" + authors[c.author].email + ">\n" + c.sha;
    var head = el("button", "v-head", toggle, el("span", "v-rev", "~" + (m.versions.length - 1 - k)),
      el("span", "v-when", when(c.time)), opBadge(v.op), el("span", "who", authors[c.author].name), subject,
      el("span", "sha", c.sha.slice(0, 8)));
    head.type = "button";
    var body = null;
    function show() {
      if (state.openVersions[k]) {
        body = versionBody(m, texts, k);
        item.appendChild(body);
      }
      toggle.textContent = state.openVersions[k] ? "\u25be" : "\u25b8";
    }
    head.addEventListener("click", function () {
      state.openVersions[k] = !state.openVersions[k];
      if (body) { body.remove(); body = null; }
      show();
    });
    item.appendChild(head);
    show();
    return item;
  }

  // ------------------------------------------------------------- start
  function start() {
    renderHeader();
    var names = authors.map(function (a) { return a.name; }).concat(mems.map(function (m) { return m.agent; }));
    fillSelect($("f-author"), uniqueSorted(names));
    fillSelect($("f-type"), uniqueSorted(mems.map(function (m) { return m.type; })));
    var tagKeys = [];
    mems.forEach(function (m) { tagKeys.push.apply(tagKeys, m.tagKeys); });
    fillSelect($("f-tag"), uniqueSorted(tagKeys));
    fillSelect($("f-tier"), raw.tiers.concat(mems.some(function (m) { return m.gone; }) ? ["(removed)"] : []));
    ["f-author", "f-type", "f-tag", "f-tier", "f-from", "f-to"].forEach(function (id) {
      $(id).addEventListener("change", readFilters);
    });
    var typing = null;
    $("f-text").addEventListener("input", function () { clearTimeout(typing); typing = setTimeout(readFilters, 150); });
    $("filters").addEventListener("submit", function (e) { e.preventDefault(); readFilters(); });
    $("filters").addEventListener("reset", function () { setTimeout(readFilters, 0); });
    $("tab-timeline").addEventListener("click", function () { setTab("timeline"); });
    $("tab-memories").addEventListener("click", function () { setTab("memories"); });
    applyFilters();
    renderDetail();
    var params = new URLSearchParams(location.hash.slice(1));
    var wanted = params.get("memory");
    if (wanted) {
      var found = mems.filter(function (m) { return m.id === wanted; })[0];
      var sha = params.get("commit"), at = null;
      if (found && sha) commits.forEach(function (c) { if (c.sha.indexOf(sha) === 0) at = c.i; });
      if (found) openMemory(found.i, at);
    }
  }

  start();
})();
