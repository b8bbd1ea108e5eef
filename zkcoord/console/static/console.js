// The console's one script: pages that change ask for their fragment again
// (data-poll, every data-interval ms) and swap it in; the group page adds
// each reading of its owners to the live ownership timeline. No framework,
// no build step: the browser runs this file as it is served.
"use strict";

(function () {
  const live = document.getElementById("live");
  const stale = document.getElementById("stale");
  const timeline = document.getElementById("timeline");
  const COLUMNS = 120;  // readings kept on the timeline

  // -- members' colours, as the drill's timeline gives them: in order of first sight
  const palette = timeline ? timeline.dataset.palette.split(",") : [];
  const colours = new Map();
  function colour(member) {
    if (!colours.has(member)) {
      colours.set(member, palette[colours.size % palette.length]);
    }
    return colours.get(member);
  }
  function paintSwatches(root) {
    root.querySelectorAll(".swatch[data-member]").forEach(function (el) {
      el.style.background = colour(el.dataset.member);
    });
  }

  // -- the live ownership timeline: one row per partition, one cell per reading
  const rows = new Map();
  let readings = 0;
  function addReading(owners) {
    readings += 1;
    Object.keys(owners).sort(byPartition).forEach(function (tp) {
      if (!rows.has(tp)) {
        const row = document.createElement("div");
        row.className = "row";
        row.dataset.tp = tp;
        const label = document.createElement("span");
        label.className = "label";
        label.textContent = tp;
        const cells = document.createElement("span");
        cells.className = "cells";
        for (let i = 1; i < readings; i++) { cells.appendChild(cell(null)); }
        row.append(label, cells);
        insertSorted(row, tp);
        rows.set(tp, cells);
      }
    });
    rows.forEach(function (cells, tp) {
      cells.appendChild(cell(tp in owners ? owners[tp] : null));
      while (cells.childElementCount > COLUMNS) { cells.firstElementChild.remove(); }
    });
    drawLegend();
  }
  function cell(member) {
    const el = document.createElement("span");
    el.className = member ? "cell" : "cell none";
    if (member) {
      el.style.background = colour(member);
      el.title = member;
      el.dataset.member = member;
    }
    return el;
  }
  function byPartition(a, b) {
    const [ta, pa] = split(a), [tb, pb] = split(b);
    return ta < tb ? -1 : ta > tb ? 1 : pa - pb;
  }
  function split(tp) {
    const at = tp.lastIndexOf("-");
    return [tp.slice(0, at), Number(tp.slice(at + 1))];
  }
  function insertSorted(row, tp) {
    const after = Array.from(timeline.children).find(function (r) { return byPartition(r.dataset.tp, tp) > 0; });
    timeline.insertBefore(row, after || null);
  }
  function drawLegend() {
    const legend = document.getElementById("legend");
    legend.replaceChildren();
    colours.forEach(function (c, member) {
      const item = document.createElement("span");
      item.className = "item";
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = c;
      item.append(swatch, document.createTextNode(member));
      legend.appendChild(item);
    });
  }
  function readOwners(root) {
    const data = root.querySelector("#ownership");
    return data ? JSON.parse(data.textContent) : null;
  }

  // -- asking again
  function showStale(text) {
    stale.textContent = text;
    stale.hidden = false;
  }
  async function refresh() {
    try {
      const response = await fetch(live.dataset.poll, {headers: {"Accept": "text/html"}, cache: "no-store"});
      const body = await response.text();
      if (response.status === 401) {
        window.location.reload();  // the login ended: the page takes the viewer to the login form
        return;
      }
      if (!response.ok) {
        const page = document.createElement("div");
        page.innerHTML = body;
        showStale("Showing the last reading: " + page.textContent.replace(/\s+/g, " ").trim());
        return;
      }
      live.innerHTML = body;
      stale.hidden = true;
      paintSwatches(live);
      const owners = readOwners(live);
      if (timeline && owners) { addReading(owners); }
    } catch (error) {
      showStale("Showing the last reading: the console cannot be reached (" + error.message + ")");
    }
  }

  if (timeline) {
    const owners = readOwners(live);
    if (owners) { addReading(owners); }
  }
  if (live) {
    paintSwatches(live);
    let busy = false;
    setInterval(async function () {
      if (busy) { return; }
      busy = true;
      try { await refresh(); } finally { busy = false; }
    }, Number(live.dataset.interval) || 2000);
  }
})();
