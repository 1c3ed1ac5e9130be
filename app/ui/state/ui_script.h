// --ui-script FILE: a tiny list of scripted actions that drives the desktop app in tests (under
// Xvfb). One action per line; '#' starts a comment. Actions:
//   open PANEL | close PANEL        expand/collapse a panel: models options chat samplers server stats logs
//   set OPTION VALUE                set an engine option (name or --flag) as typed in the panel
//   options_view VIEW               the Engine options panel's tab: quick, advanced, or advanced_all
//                                   (Advanced with the options that have no effect shown)
//   sampler KEY VALUE               set a sampler parameter (JSON value: 0.7, true, "never")
//   structured MODE [TEXT...]       the structured-output field: off, json_schema, regex, choice or
//                                   gbnf, and its text (\n for a newline)
//   load | unload                   click Load / Unload
//   wait_loaded [SECONDS]           wait until loading ends (default 120 s); a failed load ends the
//                                   script with exit code 3 and the error on stderr
//   type TEXT...                    put TEXT in the chat input (\n for a newline)
//   send | stop | regenerate        chat buttons
//   wait_reply [SECONDS]            wait until the reply finished (default 120 s); timeout: exit 4
//   expect_reply                    the last message must be a non-empty finished reply (else exit 5)
//   wait_input TEXT...              wait (up to 30 s) until the chat input holds TEXT (\n: newline);
//                                   for keyboard tests that type with xdotool. Timeout: exit 4
//   wait_chat_error TEXT...         wait (up to 30 s) until the chat shows an error containing TEXT
//   server on | server off          switch the local API
//   hub_search QUERY                search the hub and wait for the results
//   hub_repo REPO                   pick a repo (lists its refs and files) and wait for the listing
//   download                        download the chosen files
//   wait_download [SECONDS]         wait until the download ends (default 600 s); a failed
//                                   download ends the script with exit code 6
//   frames N                        render N more frames
//   screenshot PATH                 save a PNG of the next frame
//   quit [CODE]                     exit (default 0)
#pragma once

#include <string>
#include <vector>

namespace cypris {

struct ScriptAction {
  enum class Kind {
    Open,
    Close,
    Set,
    OptionsView,
    Sampler,
    Structured,
    Load,
    Unload,
    WaitLoaded,
    Type,
    Send,
    Stop,
    Regenerate,
    WaitReply,
    ExpectReply,
    WaitInput,
    WaitChatError,
    Server,
    HubSearch,
    HubRepo,
    Download,
    WaitDownload,
    Frames,
    Screenshot,
    Quit
  };
  Kind kind = Kind::Frames;
  std::string arg;    // panel, option key, text, path, "on"/"off"
  std::string value;  // set/sampler: the value text
  double number = 0;  // seconds, frames, exit code
  int line = 0;
};

// Throws cypris::Error naming the file and line for an unknown action or a missing argument.
std::vector<ScriptAction> parse_ui_script(const std::string& text, const std::string& where);
std::vector<ScriptAction> load_ui_script(const std::string& path);

}  // namespace cypris
