// The status page's own files (dashboard/status/index.html, status.css, status.js),
// compiled into the coordinator by embed_assets.sh so that it needs no files at run time
// besides Chart.js. Served by coordinator/http_routes.h.
#ifndef MTRAIN_DASHBOARD_STATUS_STATUS_PAGE_ASSETS_H_
#define MTRAIN_DASHBOARD_STATUS_STATUS_PAGE_ASSETS_H_

namespace mtrain {

// NUL-terminated UTF-8 text of each file.
extern const char kStatusPageHtml[];
extern const char kStatusPageCss[];
extern const char kStatusPageJs[];

}  // namespace mtrain

#endif  // MTRAIN_DASHBOARD_STATUS_STATUS_PAGE_ASSETS_H_
