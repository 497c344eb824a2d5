from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views import defaults
from django.views.generic import RedirectView

from channels_app.api_auth import SERVER_ERROR, api_error_handler
from channels_app.metrics import metrics_view

from .health import healthz, readyz
from .login_throttle import login_throttled
from .runtime.url_prefix import redirect_within_prefix

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="chat-index", permanent=False)),
    path("favicon.ico", RedirectView.as_view(url=static("qorven/favicon.svg"), permanent=True)),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    # Before the admin's own. Each sign-in and sign-out follows a `next` under the prefix only.
    path("admin/login/", redirect_within_prefix(login_throttled(admin.site.login), "admin:index")),
    path("admin/logout/", redirect_within_prefix(admin.site.logout, "admin:index")),
    path("admin/", admin.site.urls),
    path("accounts/login/", redirect_within_prefix(login_throttled(auth_views.LoginView.as_view(
        redirect_authenticated_user=True)), settings.LOGIN_REDIRECT_URL), name="login"),
    path("accounts/logout/", redirect_within_prefix(auth_views.LogoutView.as_view(), settings.LOGOUT_REDIRECT_URL),
         name="logout"),
    path("v1/", include("channels_app.urls")),
    path("", include("channels_app.web_urls")),
]

# The API's errors are JSON wherever they arise (a path under /v1/ that names nothing, a
# host not allowed, a failure of ours); a page's are Django's.
handler400 = api_error_handler(400, "bad request", defaults.bad_request)
handler403 = api_error_handler(403, "forbidden", defaults.permission_denied)
handler404 = api_error_handler(404, "no such endpoint: see the API in the README", defaults.page_not_found)
handler500 = api_error_handler(500, SERVER_ERROR, defaults.server_error)
