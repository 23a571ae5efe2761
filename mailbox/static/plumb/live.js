/*
 * plumb/live.js: a person's admin pages keep themselves fresh while in view
 * (SPEC §5.1). Served as a static file, no build step, nothing fetched from
 * elsewhere; loaded only for people who take part (templates/admin/base_site.html).
 *
 * Every few seconds, while the tab is visible, it asks the page's pulse
 * (admin/people/pulse/: the unread count, and a state that changes when the
 * page would) and updates the header's count. A page that has live parts
 * (data-plumb-live: a room's transcript, a thread, the inbox) is fetched again
 * when its state changed, and each part (data-plumb-part, by id) is swapped
 * for its fresh copy, unless the person is busy in it (focus inside, an open
 * review, text typed). Inputs marked data-plumb-sync take their fresh value
 * (the compose box's reference point follows the events shown).
 *
 * Without scripts none of this runs: every page is right when it is loaded.
 */
(function () {
  "use strict";

  var link = document.querySelector("a[data-plumb-pulse]");
  if (!link || !window.fetch || !window.DOMParser) {
    return;
  }
  var live = document.querySelector("[data-plumb-live]");
  var pulse = (live || link).getAttribute("data-plumb-pulse");
  var state = live ? live.getAttribute("data-plumb-state") : null;
  var seconds = Number(link.getAttribute("data-plumb-refresh")) || 5;
  var asking = false;

  function setUnread(count) {
    var badge = document.querySelector("[data-plumb-unread]");
    if (!badge) {
      return;
    }
    badge.textContent = String(count);
    badge.title = count + " unread";
    badge.hidden = count === 0;
  }

  function busyIn(part) {
    if (part.contains(document.activeElement) || part.querySelector("details[open]")) {
      return true;
    }
    var fields = part.querySelectorAll("textarea, input[type=text]");
    for (var i = 0; i < fields.length; i += 1) {
      if (fields[i].value !== fields[i].defaultValue) {
        return true;
      }
    }
    return false;
  }

  function swap(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    document.querySelectorAll("[data-plumb-part]").forEach(function (part) {
      var next = fresh.getElementById(part.id);
      if (next && !busyIn(part)) {
        part.replaceWith(document.importNode(next, true));
      }
    });
    document.querySelectorAll("[data-plumb-sync]").forEach(function (input) {
      var next = fresh.getElementById(input.id);
      if (next) {
        input.value = next.value;
      }
    });
    var badge = fresh.querySelector("[data-plumb-unread]");
    if (badge) {
      setUnread(Number(badge.textContent) || 0);
    }
    var freshLive = fresh.querySelector("[data-plumb-live]");
    return freshLive ? freshLive.getAttribute("data-plumb-state") : null;
  }

  function reload() {
    return fetch(window.location.href, { credentials: "same-origin" }).then(function (answer) {
      if (!answer.ok) {
        return null;
      }
      return answer.text().then(function (html) {
        state = swap(html);
      });
    });
  }

  function tick() {
    if (asking || document.visibilityState !== "visible") {
      return;
    }
    asking = true;
    fetch(pulse, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (answer) {
        return answer.ok ? answer.json() : null;
      })
      .then(function (news) {
        if (!news) {
          return null;
        }
        setUnread(news.unread);
        if (live && news.state !== state) {
          return reload();
        }
        return null;
      })
      .catch(function () {
        return null;
      })
      .then(function () {
        asking = false;
      });
  }

  window.setInterval(tick, seconds * 1000);
  document.addEventListener("visibilitychange", tick);
})();
