<#
.SYNOPSIS
Installs (or upgrades) baton as a Windows service.

.DESCRIPTION
Run from an elevated PowerShell in the folder that holds baton.exe and baton-worker.exe.
  1. Stops and removes a service of the same name (its workers checkpoint first; the jobs
     resume after the upgrade).
  2. Creates the state folder with an ACL of its own: SYSTEM and Administrators full control,
     optionally read access for -ClientGroup, nothing inherited from %ProgramData%.
  3. Copies the executables under Program Files and writes a default settings file if there is
     none (an existing one is kept).
  4. Registers the service with `baton service install` (auto start, LocalSystem, recovery:
     restart after 5 s, 10 s, 30 s, failure count reset after a day), then sets the same
     recovery again with `sc.exe failure` / `sc.exe failureflag` as a belt-and-braces.
  5. Starts it (unless -NoStart) and waits until it is Running.

.EXAMPLE
.\install-service.ps1
.\install-service.ps1 -Name baton-gpu -StateDir D:\baton -ClientGroup "baton users"
#>
[CmdletBinding()]
param(
  [string]$SourceDir = $PSScriptRoot,
  [string]$InstallDir = (Join-Path $env:ProgramFiles 'baton'),
  [string]$StateDir = (Join-Path $env:ProgramData 'baton'),
  [string]$Settings = '',
  [string]$Name = 'baton',
  [string]$ClientGroup = '',
  [switch]$NoStart
)

$ErrorActionPreference = 'Stop'
Set-StrictMode -Version 3

function Invoke-Checked([string]$What, [scriptblock]$Command) {
  & $Command
  if ($LASTEXITCODE -ne 0) { throw "$What failed with exit code $LASTEXITCODE" }
}

$principal = New-Object Security.Principal.WindowsPrincipal(
  [Security.Principal.WindowsIdentity]::GetCurrent())
if (-not $principal.IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)) {
  throw 'Run this script from an elevated (Administrator) PowerShell.'
}
foreach ($exe in 'baton.exe', 'baton-worker.exe') {
  if (-not (Test-Path (Join-Path $SourceDir $exe))) {
    throw "$exe not found in $SourceDir (pass -SourceDir)"
  }
}
if ($Settings -eq '') { $Settings = Join-Path $StateDir 'settings.json' }
$baton = Join-Path $InstallDir 'baton.exe'

# 1. An existing service holds the executables open: stop it the graceful way first.
if (Get-Service -Name $Name -ErrorAction SilentlyContinue) {
  Write-Host "Removing the existing service $Name (running jobs checkpoint first)"
  $old = if (Test-Path $baton) { $baton } else { Join-Path $SourceDir 'baton.exe' }
  Invoke-Checked "baton service uninstall" { & $old service uninstall --name $Name }
}

# 2. The state folder holds checkpoints, job records, the service log and the control API's
#    endpoint file: SYSTEM and Administrators only, plus read for the client group if asked.
New-Item -ItemType Directory -Force -Path $StateDir | Out-Null
$grants = @('*S-1-5-18:(OI)(CI)F', '*S-1-5-32-544:(OI)(CI)F')  # SYSTEM, Administrators
if ($ClientGroup -ne '') { $grants += "${ClientGroup}:(OI)(CI)RX" }
$icaclsArgs = @($StateDir, '/inheritance:r')
foreach ($g in $grants) { $icaclsArgs += @('/grant:r', $g) }
Invoke-Checked "icacls $StateDir" { & icacls.exe @icaclsArgs | Out-Null }

# 3. Executables and settings.
New-Item -ItemType Directory -Force -Path $InstallDir | Out-Null
Copy-Item -Force (Join-Path $SourceDir 'baton.exe'), (Join-Path $SourceDir 'baton-worker.exe') `
  -Destination $InstallDir
if (-not (Test-Path $Settings)) {
  [ordered]@{ state_dir = $StateDir; max_workers = 1; log_level = 'info' } |
    ConvertTo-Json | Set-Content -Encoding UTF8 -Path $Settings
  Write-Host "Wrote default settings to $Settings"
}

# 4. Register. `baton service install` checks the settings file and sets the recovery actions
#    itself; sc.exe repeats them so a partial failure there still leaves restarts in place.
Invoke-Checked "baton service install" {
  & $baton service install --name $Name --settings $Settings --state-dir $StateDir `
    --log-file (Join-Path $StateDir 'service.log') --worker (Join-Path $InstallDir 'baton-worker.exe')
}
Invoke-Checked "sc.exe failure" {
  & sc.exe failure $Name reset= 86400 actions= restart/5000/restart/10000/restart/30000
}
Invoke-Checked "sc.exe failureflag" { & sc.exe failureflag $Name 1 }

# 5. Start and wait for RUNNING (the daemon reports it once every job has been recovered).
if (-not $NoStart) {
  Start-Service -Name $Name
  (Get-Service -Name $Name).WaitForStatus('Running', [TimeSpan]::FromSeconds(120))
  Get-Service -Name $Name | Format-Table -AutoSize Name, Status, StartType
}
Write-Host "Log: $(Join-Path $StateDir 'service.log')"
